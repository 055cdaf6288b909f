"""`mgpukit tour` (small): every strategy run, a report written, failures reported not hidden."""
from mgpukit.tour import results_markdown, run_tour, tour_plan, update_readme


def test_tour_plan_covers_every_registered_strategy():
    from mgpukit.strategies import available

    planned = {name for name, _ in tour_plan(4)}
    assert planned == {s.name for s in available()}


def test_small_tour_writes_a_report(tmp_path):
    out = run_tour(workers=2, steps=2, out=tmp_path, only={"single", "ddp"},
                   emulated_workers=(1, 2), progress=False)
    assert out["failures"] == []
    html = (tmp_path / "index.html").read_text()
    assert "measured" in html and "emulated" in html and "predicted" in html
    table = (tmp_path / "results.md").read_text()
    assert "| ddp |" in table
    # the emulated rows are a GPU-sized model in shape mode, labelled so; 2 GPUs halve the
    # per-GPU batch of a compute-bound step
    emu = sorted((r for r in out["records"] if r["mode"] == "emulated"), key=lambda r: r["world_size"])
    assert [r["world_size"] for r in emu] == [1, 2]
    assert all(r["shape"] and r["config"]["model"] == "gpt2-124m" for r in emu)
    assert "shape mode gpt2-124m" in table
    assert 1.5 < emu[1]["tokens_per_s"] / emu[0]["tokens_per_s"] <= 2.0


def test_update_readme_replaces_only_the_block(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- results:start -->\nold\n<!-- results:end -->\noutro\n")
    update_readme(readme, "| a |\n", command="mgpukit tour")
    text = readme.read_text()
    assert "old" not in text and "| a |" in text and text.startswith("intro") and text.endswith("outro\n")

