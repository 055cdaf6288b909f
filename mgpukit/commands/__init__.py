"""The command line's subcommands that are more than a few lines, outside the layers they drive
(`mgpukit.cli` is the entry point and holds the rest):

- `plan`         ``mgpukit plan``: the cost model's flags, what runs, the JSON
- `plan_args`    its flags turned into a model, a layout and a token budget, refused in one line
- `plan_format`  the tables it prints
"""
