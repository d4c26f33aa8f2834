"""`import pipetrain` end to end (docs/python.md): a Hugging Face model trained on 2 ranks
and back in its own class, scored there as pipetrain reported; data and captures cached
by content; schedules, simulations and plans as objects; errors as PipetrainError; Ctrl-C
stops the ranks and leaves the last checkpoint intact."""
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
import pipetrain  # noqa: E402

VOCAB, CONTEXT = 64, 16


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPETRAIN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def tiny_gpt2():
    import transformers
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=CONTEXT, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, bos_token_id=0, eos_token_id=0))


def sequences(n, seed):
    """Token sequences a model can learn: each next token follows from the one before."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, VOCAB, (n, 1), generator=g)
    tokens = (start + 7 * torch.arange(CONTEXT + 1)) % VOCAB
    return tokens[:, :-1], tokens[:, 1:]


def data():
    x, y = sequences(256, 1)
    tx, ty = sequences(64, 2)
    return {"input_ids": x, "labels": y, "test_input_ids": tx, "test_labels": ty}


def test_a_hugging_face_model_trains_on_two_ranks_and_comes_back_in_its_own_class(cache, tmp_path):
    model = tiny_gpt2()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tied = model.lm_head.weight is model.transformer.wte.weight
    run = pipetrain.train(model, data(), nproc=2, batch=16, epochs=2, output="logits", lr=3e-3,
                          directory=str(tmp_path / "run"), progress=False)
    s = run.summary
    assert run.model is model and s.model == "GPT2LMHeadModel" and s.world_size == 2 and len(s.ranks) == 2
    assert s.samples_per_second > 0 and os.path.isfile(run.report)
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items()), "weights unchanged"
    assert tied and model.lm_head.weight is model.transformer.wte.weight, "tied weights untied"
    # Scored by its own forward() as pipetrain scored the test split.
    d = data()
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=d["test_input_ids"]).logits
    loss = F.cross_entropy(logits.flatten(0, 1), d["test_labels"].flatten()).item()
    accuracy = (logits.argmax(-1) == d["test_labels"]).float().mean().item()
    assert abs(loss - s.test_loss) < 1e-3 and abs(accuracy - s.test_accuracy) < 2e-3, (loss, accuracy, s)
    assert s.final_loss < 4.0, s  # from ln(64) = 4.16: it learned

    # The same data and model again: neither written nor captured twice.
    files = sorted(os.listdir(cache / "data")), sorted(os.listdir(cache / "models"))
    pipetrain.train(tiny_gpt2(), data(), nproc=2, batch=16, output="logits", progress=False,
                    directory=str(tmp_path / "again"))
    assert (sorted(os.listdir(cache / "data")), sorted(os.listdir(cache / "models"))) == files


def test_a_token_file_trains_a_module_with_its_context(tmp_path):
    import numpy as np
    tokens = np.concatenate([sequences(64, 3)[0].flatten().numpy()] * 4).astype(np.uint16)
    path = tmp_path / "tokens.bin"
    tokens.tofile(path)
    run = pipetrain.train(tiny_gpt2(), str(path), nproc=2, batch=8, output="logits", context=CONTEXT,
                          max_steps=3, no_eval=True, progress=False, directory=str(tmp_path / "run"))
    assert run.summary.samples > 0 and run.summary.world_size == 2
    with pytest.raises(pipetrain.PipetrainError, match="needs context="):
        pipetrain.train(tiny_gpt2(), str(path), output="logits", progress=False)


def test_errors_raise_pipetrain_error_with_the_one_line_message(tmp_path):
    with pytest.raises(pipetrain.PipetrainError, match="unknown schedule"):
        pipetrain.schedule("nope", 2, 4)
    with pytest.raises(pipetrain.PipetrainError, match="no 'labels'"):
        pipetrain.train(tiny_gpt2(), {"input_ids": sequences(8, 0)[0]})
    with pytest.raises(pipetrain.PipetrainError, match="no such file"):
        pipetrain.train(tiny_gpt2(), str(tmp_path / "missing.pt"))
    with pytest.raises(pipetrain.PipetrainError, match="no option no_such_option="):
        pipetrain.train(tiny_gpt2(), data(), output="logits", no_such_option=3, progress=False)


def test_keywords_are_trains_option_table(cache):
    """The keywords are the CLI's options, read from the one table both are made from: a
    misspelt one is refused with the nearest before any capture, and an option that takes
    true or false gets False spelt out, not dropped as a flag's would be."""
    with pytest.raises(pipetrain.PipetrainError, match="did you mean lr_schedule="):
        pipetrain.train(tiny_gpt2(), data(), output="logits", lr_shedule="cosine", progress=False)
    assert not (cache / "models").exists()
    table = {o["keyword"]: o for o in pipetrain.train_options()}
    assert table["microbatch_size"]["group"] == "Where the plan comes from"
    assert table["no_replication"]["flag"] and not table["pipemare_t1"]["flag"]
    from pipetrain import _binary
    assert _binary.flags({"pipemare_t1": False, "no_replication": False, "lr": 0.1}, pipetrain.train_options()) == [
        "--pipemare-t1", "false", "--lr", "0.1"]


def test_a_module_with_batch_norm_is_keyed_by_its_weights():
    from pipetrain import _data
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))  # a 0-dim step count
    key = _data.digest(model.state_dict())
    model[1].num_batches_tracked += 1
    assert _data.digest(model.state_dict()) != key


def test_progress_lines_are_read_for_a_notebooks_bar():
    from pipetrain import _progress
    assert _progress.parse("epoch 2  step 12/56  loss 0.4121  2210 samples/s  ETA 3 s\n") == (2, 12, 56, 0.4121, 2210.0)
    assert _progress.parse("trained mlp with 1f1b on 2 ranks: 48 samples") is None


def test_a_schedule_is_a_program_that_simulates_and_renders():
    program = pipetrain.schedule("1f1b", stages=2, microbatches=3)
    assert program.actions == [["0F0", "0F1", "0B0", "0F2", "0B1", "0B2"], ["1F0", "1B0", "1F1", "1B1", "1F2", "1B2"]]
    simulated = program.simulate(forward=1.0, backward=2.0)
    assert simulated.bubble_fraction == pytest.approx(1 / 4)  # (P - 1) / (M + P - 1)
    assert "<svg" in program._repr_svg_()
    zb = pipetrain.schedule("zb-h1", stages=4, microbatches=8)
    assert all(sum("W" in a for a in rank) == 8 for rank in zb.actions)  # each backward's weight part
    assert zb.simulate(1.0, 2.0, weight=1.0).bubble_fraction < simulated.bubble_fraction


def test_schedules_simulations_and_plans_run_in_process_as_the_executable_runs_them(monkeypatch):
    """pipetrain_native (built beside the executable for this Python) runs the core
    library's requests in this process; without it the executable runs them. Both give
    the same Program, the same prediction and the same one-line errors."""
    from pipetrain import _binary
    loaded = _binary.native()
    assert loaded is not None and loaded.cache_dir() == _binary.run(["--cache-dir"]).strip()
    cases = [("interleaved", 4, 8, {"chunks": 2}), ("zb-v", 2, 6, {}), ("pipedream", 2, 4, {"vertical_sync": True})]
    graph = os.path.join(ROOT, "bench", "profiles", "pipedream-gnmt.json")
    cluster = os.path.join(ROOT, "bench", "profiles", "pipedream-32gpus.json")

    def everything():
        out = [(p.actions, p.simulate(1.0, 2.0, 1.0).json) for p in
               (pipetrain.schedule(n, s, m, **o) for n, s, m, o in cases)]
        choice = pipetrain.plan(graph, cluster=cluster, batch=3072, schedule="2bw", microbatch_sizes=[64])
        out.append((choice.plan_json, choice.chosen.throughput))
        for bad in (lambda: pipetrain.schedule("1f1b", 2, 4, chunkz=2),
                    lambda: pipetrain.simulate(graph, cluster, {"format": "pipetrain.plan"})):
            with pytest.raises(pipetrain.PipetrainError) as raised:
                bad()
            out.append(re.sub(r"\S*/plan\.json", "plan.json", str(raised.value)))  # a temporary folder each
        return out

    in_process = everything()
    monkeypatch.setattr(_binary, "native", lambda: None)
    assert everything() == in_process
    assert in_process[-2] == "unknown option --chunkz for `pipetrain schedule`; did you mean --chunks?"


def test_a_native_module_that_does_not_load_is_passed_over_with_a_warning(tmp_path, monkeypatch):
    import sysconfig
    from pipetrain import _binary
    os.symlink(_binary.executable(), tmp_path / "pipetrain")
    (tmp_path / ("pipetrain_native" + sysconfig.get_config_var("EXT_SUFFIX"))).write_bytes(b"not a shared object")
    monkeypatch.setenv("PIPETRAIN_BIN", str(tmp_path / "pipetrain"))
    _binary.native.cache_clear()
    try:
        with pytest.warns(UserWarning, match="does not load"):
            assert _binary.native() is None
        assert pipetrain.schedule("1f1b", 2, 2).actions == [["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]]
    finally:
        _binary.native.cache_clear()


def test_a_plan_is_objects_and_simulates_as_the_planner_predicted(tmp_path):
    graph = os.path.join(ROOT, "examples/transformer/graph.json")
    cluster = os.path.join(ROOT, "examples/clusters/gpu-server.json")
    choice = pipetrain.plan(graph, cluster=cluster, batch=64)
    assert choice.candidates[0] == choice.chosen and choice.chosen.throughput > 0
    again = pipetrain.simulate(graph, cluster, choice.save(str(tmp_path / "plan.json")))
    assert again.throughput == pytest.approx(choice.chosen.throughput, rel=1e-6)
    fixed = pipetrain.plan(graph, cluster=cluster, batch=64, schedule="gpipe")
    assert fixed.chosen.plan.schedule == "gpipe"


def test_a_module_planned_in_python_trains_under_that_plan(tmp_path):
    cluster = {"format": "pipetrain.cluster", "version": 1,
               "devices": [{"name": f"dev{i}", "kind": "cpu", "speed": 1.0, "memory_bytes": 1 << 32} for i in range(2)],
               "levels": [{"name": "loopback", "group_size": 2, "bandwidth": 3.4e9, "latency": 5e-5}]}
    choice = pipetrain.plan(tiny_gpt2(), data(), cluster=cluster, batch=16, output="logits", no_replication=True,
                            use_all_devices=True)
    assert {d for stage in choice.chosen.plan.stages for d in stage.devices} == {"dev0", "dev1"}  # a pipeline on both
    run = pipetrain.train(tiny_gpt2(), data(), nproc=2, output="logits", plan=choice, progress=False,
                          directory=str(tmp_path / "run"))
    assert run.summary.plan.stages == choice.chosen.plan.stages
    assert run.summary.plan.schedule == choice.chosen.plan.schedule
    assert len(os.listdir(os.path.join(os.environ["PIPETRAIN_CACHE_DIR"], "models"))) == 1  # captured once


def test_ctrl_c_stops_the_ranks_and_leaves_the_last_checkpoint_intact(tmp_path):
    checkpoints = tmp_path / "ckpt"
    script = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {os.path.join(ROOT, "python")!r}); sys.path.insert(0, {HERE!r})
        import pipetrain, test_api
        model = test_api.tiny_gpt2()
        try:
            pipetrain.train(model, test_api.data(), nproc=2, epochs=1000, output="logits", schedule="1f1b",
                            stage_bounds="0,3,7", microbatches=2, microbatch_size=4,
                            checkpoint_dir={str(checkpoints)!r}, checkpoint_every=4, progress=False)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             env={**os.environ})
    deadline = time.time() + 240
    while time.time() < deadline and not any(checkpoints.glob("*/manifest.json")):
        assert child.poll() is None, "training ended before its first checkpoint"
        time.sleep(0.5)
    assert any(checkpoints.glob("*/manifest.json")), "no checkpoint within 240 s"
    child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=60)
    assert "interrupted" in out
    left = subprocess.run(["pgrep", "-f", str(checkpoints)], capture_output=True, text=True).stdout.split()
    assert not left, f"ranks left running: {left}"
    newest = max(checkpoints.glob("*/manifest.json"), key=os.path.getmtime)
    assert json.load(open(newest))["format"]


def test_the_readme_example_runs_verbatim(tmp_path):
    readme = open(os.path.join(ROOT, "README.md")).read().split("\n")
    start = readme.index("    import sys, torch, transformers")
    block = []
    for line in readme[start:]:
        if line and not line.startswith("    "):
            break
        block.append(line[4:])
    done = subprocess.run([sys.executable, "-c", "\n".join(block)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Run(" in done.stdout and "final loss" in done.stdout, done.stdout[-2000:]


def test_pip_install_makes_a_package_that_works_outside_the_checkout(tmp_path):
    target = tmp_path / "site"
    built = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                            "--target", str(target), ROOT], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    check = ("import pipetrain, pipetrain_capture; "
             "print(pipetrain.__file__); print(pipetrain_capture.__file__); "
             "print(pipetrain.schedule('1f1b', 2, 2).actions)")
    executable = os.path.abspath(os.environ.get("PIPETRAIN_BIN", os.path.join(ROOT, "build", "pipetrain")))
    env = {**os.environ, "PYTHONPATH": str(target), "PIPETRAIN_BIN": executable}
    done = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith(str(target)) and lines[1].startswith(str(target)), lines
    assert lines[2] == "[['0F0', '0F1', '0B0', '0B1'], ['1F0', '1B0', '1F1', '1B1']]"
