"""Studies: experiments composed from the library that return data (records, rows), shared by
the notebooks (through `mgpukit.lessons`) and the benchmarks (`mgpukit.bench`), which is why
they sit below both. Nothing here draws, prints or builds a control.

- `warm`           what a study imports in the parent before its workers fork
- `launch`         the tiny GPT launch-bound on one emulated H100 (notebook 00, `bench emulation`)
- `pipeline_lab`   equal-cost stages, several schedules in one launch (notebook 04, `bench pipeline`)
- `sharding`       the ZeRO stages measured beside their formulas (notebook 06, `bench memory`)
- `checkpointing`  activation checkpointing's trade, measured (notebook 07, `bench checkpointing`)
- `tp_links`       one GPU over three tp links, predicted (notebook 05, `bench tp`)
- `hybrid`         dp × tp × pp runs, the closed form beside the virtual clock (notebook 08, `bench hybrid`)
- `alpha_beta`     one all-reduce under the alpha-beta model, predicted (notebook 02's explorer)
- `compression`    compression's step time against link bandwidth, from emulated runs (notebook 03)
"""
