"""torch.optim.Muon on the hidden matrices and torch.optim.AdamW on the rest,
fed the gradients a dflow test wrote: the independent reference for
train/muon.cpp.

    muon_reference.py IN.json OUT.json

IN: {"params": {name: {"shape": [...], "values": [...]}}, "muon": [names],
     "steps": [{"lr": adamw lr, "muon_lr": muon lr, "grads": {name: [...]}}],
     "muon_options": {...}, "adamw_options": {...}}
OUT: {name: [values after the last step]} (float32, as float64 numbers).
"""
import json
import sys

import torch


def main(source, target):
    with open(source) as f:
        spec = json.load(f)
    params = {
        name: torch.tensor(p["values"], dtype=torch.float32).view(p["shape"]).requires_grad_(True)
        for name, p in spec["params"].items()
    }
    mo, ao = spec["muon_options"], spec["adamw_options"]
    muon_params = [params[n] for n in spec["muon"]]
    rest = [p for n, p in params.items() if n not in spec["muon"]]
    muon = torch.optim.Muon(muon_params, lr=0.0, weight_decay=mo["weight_decay"], momentum=mo["momentum"],
                            nesterov=mo["nesterov"], ns_coefficients=tuple(mo["ns_coefficients"]),
                            eps=mo["eps"], ns_steps=mo["ns_steps"])
    adamw = torch.optim.AdamW(rest, lr=0.0, betas=(ao["beta1"], ao["beta2"]), eps=ao["eps"],
                              weight_decay=ao["weight_decay"]) if rest else None
    for step in spec["steps"]:
        for name, p in params.items():
            p.grad = torch.tensor(step["grads"][name], dtype=torch.float32).view(p.shape)
        muon.param_groups[0]["lr"] = step["muon_lr"]
        muon.step()
        if adamw is not None:
            adamw.param_groups[0]["lr"] = step["lr"]
            adamw.step()
    with open(target, "w") as f:
        json.dump({name: p.detach().double().flatten().tolist() for name, p in params.items()}, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
