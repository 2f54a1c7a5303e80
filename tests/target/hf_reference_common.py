"""What the transformers reference scripts share (hf_moe_reference.py,
hf_gpt_oss_reference.py): the token rows and prompts, every layer's hidden
states and the logits as transformers returns them, and its float64 greedy
decoding, in the names tests/target/hf_reference_fixtures.hpp reads."""
import os

import torch

# Which kernels the reference runs (the test's output shows it beside dflow's):
# it inherits the ctest entry's environment, as dflow does.
print("reference kernels: ATen CPU capability", torch.backends.cpu.get_cpu_capability(),
      *(["oneDNN ISA at most", os.environ["ONEDNN_MAX_CPU_ISA"]] if "ONEDNN_MAX_CPU_ISA" in os.environ else []),
      flush=True)


def rows_and_prompts(seed, vocab_size):
    generator = torch.Generator().manual_seed(seed)
    rows = [torch.randint(0, vocab_size, (n,), generator=generator).tolist() for n in (13, 9)]
    prompts = [torch.randint(0, vocab_size, (n,), generator=generator).tolist() for n in (5, 8, 3)]
    return rows, prompts


def reference_states(load, rows):
    """`load(dtype)` gives the model: {dtype}.row{r}.hidden_states.{i} (i = 0
    the embeddings, then one per layer, the last after the final norm) in
    float32 and bfloat16, float32.row{r}.logits; and the float32 model."""
    tensors, float32_model = {}, None
    for dtype_name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        model = load(dtype)
        with torch.no_grad():
            for r, row in enumerate(rows):
                result = model(input_ids=torch.tensor([row]), output_hidden_states=True)
                for i, hidden in enumerate(result.hidden_states):
                    tensors[f"{dtype_name}.row{r}.hidden_states.{i}"] = hidden[0].float().contiguous()
                if dtype == torch.float32:
                    tensors[f"float32.row{r}.logits"] = result.logits[0].contiguous()
        if dtype == torch.float32:
            float32_model = model
    return tensors, float32_model


def greedy_float64(model, prompts, new_tokens):
    """The argmax continuation of each prompt by a float64 model, one full forward per token."""
    out = []
    with torch.no_grad():
        for prompt in prompts:
            ids = list(prompt)
            for _ in range(new_tokens):
                ids.append(int(torch.argmax(model(input_ids=torch.tensor([ids])).logits[0, -1])))
            out.append(ids[len(prompt):])
    return out
