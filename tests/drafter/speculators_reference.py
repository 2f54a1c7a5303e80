"""vllm-project/speculators' own code as the reference for dflow's DSpark
export and losses (tests/drafter/test_speculators_reference.cpp writes the
cases). speculators 0.9.0 is installed without its dependencies (tools/setup.sh):
its package __init__ imports its training stack (openai, datasets), so the
modules used here are loaded with bare parent packages instead.

    speculators_reference.py dspark EXPORT_DIR CASE.safetensors
        EXPORT_DIR: `dflow export --format speculators` of a drafter with DSpark
        heads; CASE: input_ids [1, T], features [1, T, n*H], anchors [N], and
        dflow's logits [N, Bs, V] (backbone plus Markov bias) and confidence
        [N, Bs] at those anchors. DSparkDraftModel is built from the export's
        config.json, loads its model.safetensors, and computes the same.
    speculators_reference.py loss LOSS CASE.safetensors [LOSS CASE.safetensors ...]
        dflow's chunked loss LOSS (row_loss, accept_rate, hidden_grad,
        loss_sum) against speculators.losses: LOSS is dflow's spelling as
        JSON, a name ("tv") or a weighted mix ({"ce": 0.1, "tv": 0.9}),
        resolved by speculators' own resolve_loss_config (eager) under
        speculators' names; each row's loss is the weighted sum of its terms,
        the gradient autograd's through them, and at temperature 1 the
        weighted sum also through compound_loss, speculators' reduction.
        One (LOSS, CASE) pair after another.
    speculators_reference.py dflash2 EXPORT_DIR CASE.safetensors
        EXPORT_DIR: `dflow export --format speculators` of a DFlash2 drafter;
        CASE: input_ids, features, anchors, loss_mask [1, T], the teacher's
        last hidden state before its final norm [1, T, H], gamma and
        selector_loss_alpha, and dflow's block logits [N, Bs, V], its loss
        sums (main, selector) and the gradient of each drafter parameter
        (grad.<name>). DFlash2DraftModel loads the export and computes the
        same with kl_div as the unary loss, on dflow's anchors; its loss
        times its denominator (the masked slots) is dflow's weighted sum.
    speculators_reference.py xpress EXPORT_DIR CASE.safetensors
        EXPORT_DIR: `dflow export --format speculators` of an XPress drafter;
        CASE: as dflash2's, with the teacher-forced refined logits
        [N, Bs, V], the loss sums (teacher-forced, consistency rounds' mean,
        base anchor), the metric sums (accept_rate, accuracy,
        base_accept_rate) and the weights. XPressDraftModel loads the export
        and computes the same with {ce: 0.1, tv: 0.9} and ce_from_data (dflow's
        ce is on the data's token), on dflow's anchors.
    speculators_reference.py load EXPORT_DIR
        EXPORT_DIR: `dflow export --format speculators` of a drafter of any
        kind. The model class its speculators_model_type names (dflash,
        dspark, dflash2, xpress) is built from its config.json, loads its
        model.safetensors with nothing missing or left over, and runs one
        backbone pass over random features of its aux layers: the logits
        are [anchors x block, vocabulary] and finite.

Prints "ok" and exits 0, or names the disagreement and exits 1.
"""
import importlib.metadata
import importlib.util
import json
import sys
import types
from pathlib import Path

import torch
from safetensors.torch import load_file

# float32 throughout: dflow and speculators differ only in summation order.
TOLERANCE = 2e-5


def load_speculators():
    spec = importlib.util.find_spec("speculators")
    if spec is None:
        sys.exit("speculators is not installed (tools/setup.sh installs speculators==0.9.0)")
    root = Path(spec.submodule_search_locations[0])
    for name, path in (("speculators", root), ("speculators.models", root / "models")):
        package = types.ModuleType(name)
        package.__path__ = [str(path)]
        sys.modules[name] = package
    import speculators.config as config  # noqa: E402
    import speculators.model as model  # noqa: E402

    sys.modules["speculators"].SpeculatorModelConfig = config.SpeculatorModelConfig
    sys.modules["speculators"].SpeculatorsConfig = config.SpeculatorsConfig
    sys.modules["speculators"].VerifierConfig = config.VerifierConfig
    sys.modules["speculators"].SpeculatorModel = model.SpeculatorModel
    import speculators.models.attention  # noqa: E402,F401  (registers the attention functions)
    import speculators.models.dspark as dspark  # noqa: E402
    import speculators.losses as losses  # noqa: E402
    import speculators.models.dflash2 as dflash2  # noqa: E402
    import speculators.models.xpress as xpress  # noqa: E402

    # What speculators/__init__.py does once its imports are done: resolve the
    # configs' torch annotations, DSpark's among them.
    config.reload_schemas()
    load_speculators.dflash2 = dflash2
    load_speculators.xpress = xpress
    return dspark, losses


def fail(what):
    print("FAIL: " + what)
    sys.exit(1)


def compare(name, got, expected, tolerance=TOLERANCE):
    scale = max(expected.abs().max().item(), 1.0)
    error = (got.double() - expected.double()).abs().max().item()
    print("%s: max |dflow - speculators| %.3g (scale %.3g)" % (name, error, scale))
    if not error <= tolerance * scale:
        fail("%s differs by %.3g > %.3g" % (name, error, tolerance * scale))


def check_dspark(export_dir, case_path):
    dspark, _ = load_speculators()
    case = load_file(case_path)
    config_json = json.loads((Path(export_dir) / "config.json").read_text())
    if config_json.get("speculators_model_type") != "dspark":
        fail("speculators_model_type %r" % config_json.get("speculators_model_type"))
    # The export names the release whose layout it is checked against here.
    installed = importlib.metadata.version("speculators")
    if config_json.get("speculators_version") != installed:
        fail("speculators_version %r, but the layout is checked against speculators %s"
             % (config_json.get("speculators_version"), installed))
    config = dspark.DSparkSpeculatorConfig(**config_json)
    config.transformer_layer_config._attn_implementation = "eager"
    model = dspark.DSparkDraftModel(config).float().eval()
    weights = load_file(str(Path(export_dir) / "model.safetensors"))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    # Reloaded from the verifier by speculators (load_verifier_weights), never saved.
    missing = [k for k in missing if k not in ("verifier_lm_head.weight", "verifier_norm.weight")]
    if missing or unexpected:
        fail("state dict: missing %s, unexpected %s" % (missing, unexpected))
    if (model.markov_head is None) != ("markov_head.markov_w1.weight" not in weights):
        fail("markov_head presence")
    if (model.confidence_head is None) != ("confidence_head.proj.weight" not in weights):
        fail("confidence_head presence")

    input_ids, features, anchors = case["input_ids"], case["features"], case["anchors"]
    T, N, Bs = input_ids.shape[1], anchors.numel(), config.block_size
    # Anchors exactly where the loss mask is 1, and as many as there are
    # (select_anchors then takes them all, sorted).
    loss_mask = torch.zeros(1, T, dtype=torch.long)
    loss_mask[0, anchors] = 1
    document_ids = torch.zeros(1, T, dtype=torch.long)
    verifier_last = torch.zeros(1, T, config.transformer_layer_config.hidden_size)
    with torch.no_grad():
        hidden, logits, _, _, indices = model._backbone_forward(
            features, input_ids, loss_mask, verifier_last, document_ids, max_anchors=N)
        if not torch.equal(indices.view(N, Bs)[:, 0], anchors):
            fail("speculators took anchors %s" % indices.view(N, Bs)[:, 0].tolist())
        # DSparkDraftModel.forward's heads, sample_from_anchor False.
        block_tokens = input_ids[0, indices].view(N, Bs)
        prev = torch.cat([block_tokens[:, :1], block_tokens[:, :-1]], dim=1)
        hidden_blocks = hidden.view(N, Bs, -1)
        logits = logits.view(N, Bs, -1)
        prev_emb = None
        if model.markov_head is not None:
            prev_emb = model.markov_head.prev_embeddings(prev)
            logits = logits + model.markov_head.block_bias(prev_token_ids=prev, hidden_states=hidden_blocks,
                                                           prev_emb=prev_emb)
        compare("logits", case["logits"], logits)
        if model.confidence_head is not None:
            if config.confidence_head_with_markov:
                conf_features = torch.cat([hidden_blocks, prev_emb.to(hidden_blocks.dtype)], dim=-1)
            else:
                conf_features = hidden_blocks
            compare("confidence", case["confidence"], model.confidence_head(conf_features))
        elif "confidence" in case:
            fail("dflow has a confidence head the export does not give")
    print("ok")


def load_export(export_dir, model_type, config_class, model_class):
    config_json = json.loads((Path(export_dir) / "config.json").read_text())
    if config_json.get("speculators_model_type") != model_type:
        fail("speculators_model_type %r" % config_json.get("speculators_model_type"))
    installed = importlib.metadata.version("speculators")
    if config_json.get("speculators_version") != installed:
        fail("speculators_version %r, but the layout is checked against speculators %s"
             % (config_json.get("speculators_version"), installed))
    config = config_class(**config_json)
    config.transformer_layer_config._attn_implementation = "eager"
    model = model_class(config).float()
    weights = load_file(str(Path(export_dir) / "model.safetensors"))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if k not in ("verifier_lm_head.weight", "verifier_norm.weight")]
    if missing or unexpected:
        fail("state dict: missing %s, unexpected %s" % (missing, unexpected))
    return config, model, weights


def check_dflash2(export_dir, case_path):
    load_speculators()
    dflash2 = load_speculators.dflash2
    import speculators.models.dflash.core as dflash_core  # noqa: E402
    config, model, weights = load_export(export_dir, "dflash2", dflash2.DFlash2SpeculatorConfig,
                                         dflash2.DFlash2DraftModel)
    case = load_file(case_path)
    input_ids, features, anchors = case["input_ids"], case["features"], case["anchors"]
    T, N, Bs = input_ids.shape[1], anchors.numel(), config.block_size
    # The verifier's head and final norm (reloaded from the verifier in speculators).
    with torch.no_grad():
        model.verifier_lm_head.weight.copy_(weights["lm_head.weight"])
        model.verifier_norm.weight.fill_(1.0)
    # dflow's anchors instead of speculators' random draw.
    dflash_core.select_anchors = lambda loss_mask, n, block_size: (anchors.clone(), torch.ones(N, dtype=torch.bool))
    document_ids = torch.zeros(1, T, dtype=torch.long)
    loss_mask = case["loss_mask"]
    kl = {"kl_div": (load_speculators_eager().kl_div_loss, 1.0)}
    with torch.no_grad():
        _, logits, _, _, indices = model._backbone_forward(
            features, input_ids, loss_mask, case["teacher"], document_ids, max_anchors=N)
        if not torch.equal(indices.view(N, Bs)[:, 0], anchors):
            fail("speculators took anchors %s" % indices.view(N, Bs)[:, 0].tolist())
        compare("logits", case["logits"], logits.view(N, Bs, -1))
    alpha = case["selector_loss_alpha"].item()
    _, loss, metrics = model.forward(features, input_ids, loss_mask, case["teacher"], document_ids,
                                     loss_config=kl, tv_loss_fn=load_speculators_eager().tv_loss,
                                     gamma=case["gamma"].item(), max_anchors=N,
                                     selector_loss_alpha=alpha)
    # speculators divides each weighted sum by the masked slots (plus its eps).
    aligned = loss_mask[0, indices].view(N, Bs).clone()
    aligned[:, 0] = 0
    denominator = aligned.sum().double() + 1e-5
    compare("unary loss sum", case["main_loss_sum"], metrics["unary_loss_sum"].double() * denominator, 1e-4)
    compare("selector loss sum", case["selector_loss_sum"], metrics["selector_loss_sum"].double() * denominator, 1e-4)
    (loss * denominator.float()).backward()
    checked = 0
    for name, parameter in model.named_parameters():
        key = "grad." + name
        if key not in case:
            continue
        if parameter.grad is None:
            fail("speculators gives %s no gradient" % name)
        compare(key, case[key], parameter.grad, 1e-4)
        checked += 1
    expected = sum(1 for k in case if k.startswith("grad."))
    if checked != expected:
        fail("compared %d gradients of dflow's %d" % (checked, expected))
    print("ok")


# Argmax margin the consistency rounds need: the top two logits of every
# slot at least this far apart (float32 rounding moves them by ~1e-5), so
# that dflow's rounds and speculators' read the same previous tokens.
ARGMAX_MARGIN = 1e-3


def check_xpress(export_dir, case_path):
    load_speculators()
    xpress = load_speculators.xpress
    import speculators.models.dflash.core as dflash_core  # noqa: E402
    config, model, weights = load_export(export_dir, "xpress", xpress.XPressSpeculatorConfig, xpress.XPressDraftModel)
    if config.architectures != ["XPressSpeculator"]:
        fail("architectures %r" % config.architectures)
    case = load_file(case_path)
    input_ids, features, anchors = case["input_ids"], case["features"], case["anchors"]
    T, N, Bs = input_ids.shape[1], anchors.numel(), config.block_size
    with torch.no_grad():
        model.verifier_lm_head.weight.copy_(weights["lm_head.weight"])
        model.verifier_norm.weight.fill_(1.0)
    dflash_core.select_anchors = lambda loss_mask, n, block_size: (anchors.clone(), torch.ones(N, dtype=torch.bool))
    document_ids = torch.zeros(1, T, dtype=torch.long)
    loss_mask = case["loss_mask"]
    eager = load_speculators_eager()
    loss_config = {"ce": (eager.ce_loss, 0.1), "tv": (eager.tv_loss, 0.9)}

    # Every refine pass's bias, in order: the teacher-forced one, then the rounds.
    biases = []
    block_bias = model.refiner_head.block_bias

    def recording_block_bias(*args, **kwargs):
        out = block_bias(*args, **kwargs)
        biases.append(out.detach())
        return out

    model.refiner_head.block_bias = recording_block_bias
    _, loss, metrics = model.forward(features, input_ids, loss_mask, case["teacher"], document_ids,
                                     loss_config=loss_config, gamma=case["gamma"].item(), max_anchors=N,
                                     consistency_weight=case["consistency_weight"].item(),
                                     consistency_passes=int(case["consistency_passes"].item()),
                                     base_anchor_weight=case["base_anchor_weight"].item(),
                                     ce_from_data=True)
    passes = int(case["consistency_passes"].item())
    if len(biases) != 1 + passes:
        fail("speculators ran %d refine passes, expected %d" % (len(biases), 1 + passes))
    base = case["logits"]
    with torch.no_grad():
        _, logits, _, _, indices = model._backbone_forward(
            features, input_ids, loss_mask, case["teacher"], document_ids, max_anchors=N)
        if not torch.equal(indices.view(N, Bs)[:, 0], anchors):
            fail("speculators took anchors %s" % indices.view(N, Bs)[:, 0].tolist())
        compare("logits", base, logits.view(N, Bs, -1))
        compare("refined logits", case["refined_logits"], logits.view(N, Bs, -1) + biases[0])
        # The argmax each round is fed: the backbone's, then each round's but
        # the last, at the slots whose token a round reads (1 .. Bs - 2).
        for name, seeds in [("backbone", base)] + [("round %d" % j, base + biases[1 + j]) for j in range(passes - 1)]:
            top = seeds[:, 1:-1].topk(2, dim=-1).values
            margin = (top[..., 0] - top[..., 1]).min().item()
            print("%s argmax: top two at least %.3g apart" % (name, margin))
            if not margin >= ARGMAX_MARGIN:
                fail("the %s argmax is within %.3g of a tie: the case cannot tell the rounds apart" % (name, margin))

    # speculators divides each weighted sum by the masked slots (plus its
    # eps; its data-label ce by the slots plus 1e-8, 1e-13 apart here).
    aligned = loss_mask[0, indices].view(N, Bs).clone()
    aligned[:, 0] = 0
    denominator = aligned.sum().double() + 1e-5
    for name in ("tf_loss", "consistency_loss", "base_anchor_loss"):
        compare(name + " sum", case[name + "_sum"], metrics[name + "_sum"].double() * denominator, 1e-4)
    for name in ("accept_rate", "accuracy", "base_accept_rate"):
        compare(name + " sum", case[name + "_sum"], metrics[name + "_sum"].double(), 1e-4)
    (loss * denominator.float()).backward()
    checked = 0
    for name, parameter in model.named_parameters():
        key = "grad." + name
        if key not in case:
            continue
        if parameter.grad is None:
            fail("speculators gives %s no gradient" % name)
        compare(key, case[key], parameter.grad, 1e-4)
        checked += 1
    expected = sum(1 for k in case if k.startswith("grad."))
    if checked != expected:
        fail("compared %d gradients of dflow's %d" % (checked, expected))
    print("ok")


def load_speculators_eager():
    import speculators.losses.eager as eager  # noqa: E402
    return eager



def check_load(export_dir):
    dspark, _ = load_speculators()
    import speculators.models.dflash as dflash  # noqa: E402
    classes = {
        "dflash": (dflash.DFlashSpeculatorConfig, dflash.DFlashDraftModel),
        "dspark": (dspark.DSparkSpeculatorConfig, dspark.DSparkDraftModel),
        "dflash2": (load_speculators.dflash2.DFlash2SpeculatorConfig, load_speculators.dflash2.DFlash2DraftModel),
        "xpress": (load_speculators.xpress.XPressSpeculatorConfig, load_speculators.xpress.XPressDraftModel),
    }
    model_type = json.loads((Path(export_dir) / "config.json").read_text()).get("speculators_model_type")
    if model_type not in classes:
        fail("speculators_model_type %r is none of %s" % (model_type, sorted(classes)))
    config, model, weights = load_export(export_dir, model_type, *classes[model_type])
    model.eval()
    hidden = config.transformer_layer_config.hidden_size
    layers = len(config.aux_hidden_state_layer_ids)
    vocab = weights["lm_head.weight"].shape[0]
    T, N = 48, 2
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(1, T, layers * hidden, generator=generator)
    input_ids = torch.randint(0, vocab, (1, T), generator=generator)
    loss_mask = torch.zeros(1, T, dtype=torch.long)
    loss_mask[0, :T - config.block_size] = 1
    with torch.no_grad():
        _, logits, _, _, indices = model._backbone_forward(
            features, input_ids, loss_mask, torch.zeros(1, T, hidden), torch.zeros(1, T, dtype=torch.long),
            max_anchors=N)
    if tuple(logits.shape[-2:]) != (indices.numel(), vocab) or indices.numel() != N * config.block_size:
        fail("backbone logits %s for %d anchors of block %d, vocabulary %d"
             % (tuple(logits.shape), N, config.block_size, vocab))
    if not torch.isfinite(logits).all():
        fail("backbone logits are not finite")
    print("%s: %s loaded (%d tensors), aux layers %s, logits %s"
          % (export_dir, type(model).__name__, len(weights), config.aux_hidden_state_layer_ids, tuple(logits.shape)))
    print("ok")


# dflow's loss names and speculators' (losses.utils's maps).
SPECULATORS_NAME = {"ce": "ce", "kl": "kl_div", "reverse_kl": "rkl", "js": "jsd", "tv": "tv",
                    "neg_log_acceptance": "nla", "lk_hybrid": "lk_hybrid"}
# dflow's losses that read kl_temperature (both distributions divided by it;
# speculators' have no temperature: 1).
USES_TEMPERATURE = {"kl"}
# What speculators' loss_function adds to the masked count it divides by.
REDUCTION_EPS = 1e-5
# reverse_kl's gradient q (log q - log p - KL) subtracts numbers of the size
# of log q - log p (25 nats here, where the target is sure), each rounded
# in float32 by about 1e-6: 5 times the other losses' bound covers it.
LOG_RATIO_TOLERANCE = 1e-4


def check_loss(losses, spec, case_path):
    parsed = json.loads(spec)
    terms = {parsed: 1.0} if isinstance(parsed, str) else parsed
    config = losses.resolve_loss_config(
        json.dumps({SPECULATORS_NAME[name]: weight for name, weight in terms.items()}), "eager")
    fns = {name: config[SPECULATORS_NAME[name]][0] for name in terms}
    case = load_file(case_path)
    temperature = case["temperature"].item()
    weights = case["weights"]
    hidden = case["hidden"].clone().requires_grad_(True)

    def draft_logits():
        return (hidden @ case["lm_head"].T + case["features"] @ case["bias_weight"].T).unsqueeze(0)

    logits = draft_logits()
    targets = (case["teacher"] @ case["lm_head"].T).unsqueeze(0)
    # speculators' ce trains on the target's argmax, dflow's on the data's
    # token: the case's labels are that argmax.
    if not torch.equal(case["labels"], targets[0].argmax(-1)):
        fail("the case's labels are not the target's argmax")

    def term(name):
        t = temperature if name in USES_TEMPERATURE else 1.0
        return fns[name](logits / t, targets / t)[0]

    rows = sum(weight * term(name) for name, weight in terms.items())
    compare("%s per row" % spec, case["row_loss"], rows.detach())
    (rows * weights).sum().backward()
    gradient_tolerance = LOG_RATIO_TOLERANCE if "reverse_kl" in terms else TOLERANCE
    compare("d(sum w %s)/d hidden" % spec, case["hidden_grad"], hidden.grad, gradient_tolerance)
    # The acceptance rate, 1 - TV at temperature 1, or q(label) for ce alone.
    with torch.no_grad():
        if set(terms) == {"ce"}:
            accept = torch.exp(-fns["ce"](logits, targets)[0])
        else:
            accept = 1.0 - losses.eager.tv_loss(logits, targets)[0]
    compare("accept rate", case["accept_rate"], accept)
    if temperature == 1.0:
        # speculators' reduction: sum(w * loss) / (rows + 1e-5) per sequence,
        # dflow's step divides the same sum by the sum of the weights.
        hidden.grad = None
        P = weights.numel()
        mask = torch.ones(1, P)
        total, _ = losses.compound_loss(draft_logits(), targets, mask, torch.arange(P).unsqueeze(0), config,
                                        decay_fn=lambda pos_idx, **_: weights.unsqueeze(0))
        compare("compound_loss x (rows + eps)", case["loss_sum"], total.detach() * (P + REDUCTION_EPS))
        total.backward()
        compare("d compound_loss/d hidden x (rows + eps)", case["hidden_grad"], hidden.grad * (P + REDUCTION_EPS),
                gradient_tolerance)


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if len(sys.argv) == 4 and sys.argv[1] == "dspark":
        check_dspark(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 4 and len(sys.argv) % 2 == 0 and sys.argv[1] == "loss":
        _, losses = load_speculators()
        for i in range(2, len(sys.argv), 2):
            check_loss(losses, sys.argv[i], sys.argv[i + 1])
        print("ok")
    elif len(sys.argv) == 4 and sys.argv[1] == "dflash2":
        check_dflash2(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "xpress":
        check_xpress(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "load":
        check_load(sys.argv[2])
    else:
        sys.exit(__doc__)
