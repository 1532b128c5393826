"""A training script in nanoGPT's shape, with no perdure in it: globals as the config,
`--key=value` overrides, `out_dir/ckpt.pt` saved at each evaluation, and `--init_from=resume`
to start from it. Its data is a pure function of the iteration, so its own resume is exact.

    python nanogpt_like.py --out_dir=out --max_iters=60
    python nanogpt_like.py --out_dir=out --max_iters=60 --init_from=resume
"""

import os
import sys
import time
from ast import literal_eval

import torch
from torch import nn

out_dir = "out"
max_iters = 60
eval_interval = 10
init_from = "scratch"  # or "resume"
seed = 1337
batch_size = 8
block_size = 16
vocab_size = 64
n_embd = 32
learning_rate = 1e-3
iter_time = 0.0  # seconds each iteration sleeps: a slower model

for arg in sys.argv[1:]:  # nanoGPT's configurator: --key=value overrides a global
    key, _, value = arg.removeprefix("--").partition("=")
    if key not in globals():
        raise SystemExit(f"unknown config key: {key}")
    try:
        globals()[key] = literal_eval(value)
    except (SyntaxError, ValueError):
        globals()[key] = value


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, n_embd)
        self.mix = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(),
                                 nn.Linear(4 * n_embd, n_embd))
        self.head = nn.Linear(n_embd, vocab_size)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        x = x + self.mix(x)
        logits = self.head(x)
        return nn.functional.cross_entropy(logits.reshape(-1, vocab_size), targets.reshape(-1))


def get_batch(it: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed * 100_003 + it)
    data = torch.randint(0, vocab_size, (batch_size, block_size + 1), generator=g)
    return data[:, :-1], data[:, 1:]


torch.manual_seed(seed)
model = TinyLM()
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
iter_num = 0
if init_from == "resume":
    checkpoint = torch.load(os.path.join(out_dir, "ckpt.pt"), map_location="cpu")
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    iter_num = checkpoint["iter_num"]
    print(f"resuming from {out_dir}/ckpt.pt at iter {iter_num}", flush=True)
os.makedirs(out_dir, exist_ok=True)

while iter_num < max_iters:
    if iter_num % eval_interval == 0 and iter_num > 0:
        checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                      "iter_num": iter_num}
        torch.save(checkpoint, os.path.join(out_dir, "ckpt.tmp"))
        os.replace(os.path.join(out_dir, "ckpt.tmp"), os.path.join(out_dir, "ckpt.pt"))
        print(f"saving checkpoint to {out_dir}", flush=True)
    t0 = time.time()
    x, y = get_batch(iter_num)
    loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    time.sleep(iter_time)
    print(f"iter {iter_num}: loss {loss.item():.4f}, time {(time.time() - t0) * 1000:.2f}ms, "
          f"at {time.time():.3f}", flush=True)
    iter_num += 1

torch.save(model.state_dict(), os.path.join(out_dir, "final.pt"))
print(f"done at iter {iter_num}", flush=True)
