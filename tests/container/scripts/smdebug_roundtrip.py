"""An smdebug hook on a torch model saves tensors; smdebug's trial API reads them back."""

import sys
import tempfile

import smdebug.pytorch as smd
import torch
from smdebug.trials import create_trial

out_dir = tempfile.mkdtemp() + "/smdebug"
hook = smd.Hook(
    out_dir=out_dir,
    save_config=smd.SaveConfig(save_interval=1),
    include_collections=["weights", "gradients", "losses"],
)
model = torch.nn.Linear(3, 1, bias=False)
with torch.no_grad():
    model.weight.copy_(torch.tensor([[1.0, 2.0, 3.0]]))
loss_fn = torch.nn.MSELoss()
hook.register_module(model)
hook.register_loss(loss_fn)
# lr 0: the weights stay what we set, so the saved values can be compared exactly.
opt = torch.optim.SGD(model.parameters(), lr=0.0)
for _ in range(3):
    x, y = torch.ones(2, 3), torch.zeros(2, 1)
    loss = loss_fn(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
hook.close()

trial = create_trial(out_dir)
names = trial.tensor_names()
weight_names = [n for n in names if n.endswith("weight") and "gradient" not in n]
assert weight_names, names
steps = trial.tensor(weight_names[0]).steps()
assert list(steps) == [0, 1, 2], steps
saved = trial.tensor(weight_names[0]).value(2)
assert saved.tolist() == [[1.0, 2.0, 3.0]], saved
loss_names = [n for n in names if "loss" in n.lower()]
assert loss_names, names
# prediction 6 for every row, target 0: MSE is 36
assert float(trial.tensor(loss_names[0]).value(0)) == 36.0
print("SMDEBUG_OK", sorted(names))
sys.exit(0)
