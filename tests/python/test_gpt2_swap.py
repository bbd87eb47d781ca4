"""examples/gpt2_swap.py on a tiny GPT-2: checkpoint round trip in the HF layout (Conv1D [in, out]),
llm.c shards and raw token files, the three attention implementations agreeing, training steps."""

import importlib.util
import json
import os
import struct

import pytest

torch = pytest.importorskip("torch", minversion="2.4", reason="the GPT-2 example tests need torch >= 2.4")

import pysupport as S  # noqa: E402
from pysupport import _lib  # noqa: E402

_spec = importlib.util.spec_from_file_location("gpt2_swap", os.path.join(S.REPO, "examples", "gpt2_swap.py"))
gpt2_swap = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpt2_swap)


def _library_ok():
    try:
        _lib.library()
        return True
    except _lib.LibraryNotFoundError:
        return False


def _cuda_ok():
    try:
        return torch.cuda.is_available() and _library_ok() and _lib.cuda_device_count() > 0
    except AttributeError:
        return False


def write_hf_checkpoint(model, path, prefix="", config_json=True):
    """Save `model` the way Hugging Face's GPT2Model does: Conv1D weights [in, out], no lm_head; the head
    count in config.json (HF) or else in the file's metadata (as `flashbox gpt2 init` does)."""
    from safetensors.torch import save_file
    out = {}
    for key, t in model.state_dict().items():
        t = t.detach().float().cpu()
        out[prefix + key] = t.t().contiguous() if key.endswith(gpt2_swap._CONV1D) else t.contiguous()
    for i in range(model.cfg.n_layer):   # HF's mask buffer, which the loader must skip
        out[f"{prefix}h.{i}.attn.bias"] = torch.ones(1, 1, 4, 4)
    save_file(out, path, metadata=None if config_json else {"n_head": str(model.cfg.n_head)})
    if not config_json:
        return
    with open(os.path.join(os.path.dirname(path), "config.json"), "w") as fh:
        json.dump({"n_layer": model.cfg.n_layer, "n_head": model.cfg.n_head, "n_embd": model.cfg.n_embd,
                   "vocab_size": model.cfg.vocab_size, "n_positions": model.cfg.block_size}, fh)


def write_shard(path, tokens):
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<256i", *header))
        fh.write(struct.pack(f"<{len(tokens)}H", *tokens))


def tiny_model(n_head=4):
    torch.manual_seed(0)
    cfg = gpt2_swap.GPTConfig(block_size=128, vocab_size=300, n_layer=2, n_head=n_head, n_embd=256)
    return gpt2_swap.GPT(cfg)


def test_token_files(tmp_path):
    toks = [0, 1, 65535, 50256, 7]
    write_shard(tmp_path / "a.bin", toks)
    assert gpt2_swap.read_tokens(str(tmp_path / "a.bin")).tolist() == toks
    with open(tmp_path / "raw.bin", "wb") as fh:
        fh.write(struct.pack("<5H", *toks))
    assert gpt2_swap.read_tokens(str(tmp_path / "raw.bin")).tolist() == toks


def test_checkpoint_round_trip(tmp_path):
    pytest.importorskip("safetensors", reason="the safetensors package is not installed")
    model = tiny_model(n_head=8).eval()   # not n_embd / 64: the head count must come from the file
    for prefix, config_json in (("", True), ("transformer.", False)):
        folder = tmp_path / ("hf" if config_json else "flashbox")
        folder.mkdir()
        path = str(folder / "model.safetensors")
        write_hf_checkpoint(model, path, prefix, config_json)
        loaded = gpt2_swap.load_checkpoint(path).eval()
        assert loaded.cfg.n_head == 8 and loaded.cfg.n_layer == 2 and loaded.cfg.block_size == 128
        x = torch.randint(0, 300, (2, 16))
        with torch.no_grad():
            assert torch.equal(model(x), loaded(x))


@pytest.mark.skipif(not _library_ok(), reason="libflashbox.so not found (set FLASHBOX_LIBRARY)")
@pytest.mark.parametrize("device", [pytest.param("cuda", marks=pytest.mark.skipif(
    not _cuda_ok(), reason="no CUDA GPU, or libflashbox built without CUDA")), "cpu"])
def test_attention_swap_gives_the_same_loss_and_trains(tmp_path, device):
    pytest.importorskip("safetensors", reason="the safetensors package is not installed")
    model = tiny_model()
    ckpt = str(tmp_path / "model.safetensors")
    write_hf_checkpoint(model, ckpt)
    g = torch.Generator().manual_seed(1)
    write_shard(tmp_path / "val.bin", torch.randint(0, 300, (2 * 4 * 64 + 1,), generator=g).tolist())
    argv = ["--checkpoint", ckpt, "--tokens", str(tmp_path / "val.bin"), "--attention", "sdpa,flashbox,naive",
            "--count", str(2 * 4 * 64), "--seqlen", "64", "--batch", "4", "--device", device,
            "--train-steps", "2", "--json", str(tmp_path / "out.json")]
    try:
        results = gpt2_swap.main(argv)
    except _lib.FlashboxError as e:
        S.skip_if_unimplemented(e, f"flashbox on {device}")
        raise
    losses = {r["attention"]: r["loss"] for r in results}
    tol = 1e-5 if device == "cpu" else 2e-3   # fp32 on CPU; bf16 autocast on CUDA
    assert abs(losses["flashbox"] - losses["sdpa"]) < tol, losses
    assert abs(losses["naive"] - losses["sdpa"]) < tol, losses
    for r in results:
        assert len(r["train_losses"]) == 2 and all(l == l for l in r["train_losses"])
    # The same weights and batches: the first training step's loss agrees across attentions too.
    first = {r["attention"]: r["train_losses"][0] for r in results}
    assert abs(first["flashbox"] - first["sdpa"]) < tol, first
    assert json.load(open(tmp_path / "out.json"))["results"][1]["attention"] == "flashbox"
