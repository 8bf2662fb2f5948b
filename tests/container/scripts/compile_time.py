"""How long torch.compile takes at the first step, cold or from a kept cache
(docs/pytorch.md, "The compile cache"): a training step (forward, backward) of MODEL compiled,
timed. Run it twice with the same TORCHINDUCTOR_CACHE_DIR to see the cached time.

    python compile_time.py [mlp|resnet18|gpt]

gpt: a GPT-2-small-sized transformer (12 layers, width 768, 162 M parameters, 2 x 128 tokens),
the evidence for BYOC_STALL_TIMEOUT's default (docs/contract.md, "When a job stalls").
"""

import os
import sys
import time

import torch


def model(name: str) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    if name == "resnet18":
        import torchvision

        return torchvision.models.resnet18(weights=None), torch.randn(4, 3, 64, 64)
    if name == "gpt":
        nn, width, tokens, vocab = torch.nn, 768, 128, 50257

        class GPT(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(vocab, width)
                self.position = nn.Parameter(torch.zeros(tokens, width))
                block = nn.TransformerEncoderLayer(
                    width, 12, 4 * width, batch_first=True, norm_first=True
                )
                self.body = nn.TransformerEncoder(block, 12, enable_nested_tensor=False)
                self.head = nn.Linear(width, vocab)

            def forward(self, x):
                mask = nn.Transformer.generate_square_subsequent_mask(tokens)
                hidden = self.body(self.embed(x) + self.position, mask=mask, is_causal=True)
                return self.head(hidden)

        return GPT(), torch.randint(0, vocab, (2, tokens))
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    return mlp, torch.randn(64, 32)


def main(name: str) -> None:
    net, x = model(name)
    compiled = torch.compile(net)
    t0 = time.perf_counter()
    compiled(x).sum().backward()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled(x).sum().backward()
    second = time.perf_counter() - t0
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "the default (/tmp/torchinductor_<user>)")
    print(f"COMPILE {name}: first step {first:.1f} s, next step {second:.3f} s; cache {cache}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "mlp")
