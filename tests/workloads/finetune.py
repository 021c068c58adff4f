"""A fine-tuning run as people write one: a causal language model saved with `save_pretrained`,
loaded back with `from_pretrained` (so it comes from a checkpoint, as a hub model would), and
trained for a few steps with AdamW on random tokens; with `--lora R`, peft's rank-R adapters on
its attention and MLP projections and every other weight frozen; with `--qlora R`, the same on
the model loaded in 4 bits (bitsandbytes' NF4, as QLoRA does; the output head left as it is,
computing in fp32). With `--evaluate grad`, no
training: the model evaluated (its loss read each step) with autograd recording the graph, as an
evaluation loop without `no_grad` does; `--evaluate no-grad` the same under `torch.no_grad()`.

    python finetune.py [--arch llama|gpt2] [--lora R | --qlora R] [--evaluate grad|no-grad] [--steps N]
                       [--batch B] [--seq T]

Prints one JSON line: the parameters' bytes and how many of them are trained.
"""

import argparse
import json
import tempfile

import torch


def build(arch: str):
    """A small model of the architecture, with its config (no download: made here)."""
    import transformers

    if arch == "gpt2":
        config = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=2048, n_positions=256)
        return transformers.GPT2LMHeadModel(config), ["c_attn", "c_proj", "c_fc"]
    config = transformers.LlamaConfig(
        hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=4, vocab_size=2048, max_position_embeddings=256,
    )
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    return transformers.LlamaForCausalLM(config), targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", choices=["llama", "gpt2"], default="llama")
    adapters = parser.add_mutually_exclusive_group()
    adapters.add_argument("--lora", type=int, default=None, metavar="R")
    adapters.add_argument("--qlora", type=int, default=None, metavar="R")
    parser.add_argument("--evaluate", choices=["grad", "no-grad"], default=None)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=64)
    args = parser.parse_args()
    import transformers

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as checkpoint:
        model, targets = build(args.arch)
        # A PyTorch pickle, not safetensors: safetensors maps the file into memory on the CPU, where
        # the weights would then live outside the allocator (on a GPU they are copied to it).
        model.save_pretrained(checkpoint, safe_serialization=False)
        del model
        quantized = {}
        if args.qlora is not None:
            # The rest of the model in fp32 as in the other runs (transformers makes it fp16 when
            # loading in 4 bits unless told): only the 4-bit weights differ.
            quantized["quantization_config"] = transformers.BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32
            )
            quantized["dtype"] = torch.float32
        model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, low_cpu_mem_usage=False, **quantized)
    if args.qlora is not None:
        # The weights left in 32 bits are views of the checkpoint's one buffer as loaded on the
        # host, which they would keep alive whole; moving the model to a GPU copies each of them
        # out, and so does this.
        with torch.no_grad():
            for parameter in model.parameters():
                if parameter.dtype == torch.float32:
                    parameter.data = parameter.data.clone()
    rank = args.lora if args.lora is not None else args.qlora
    if rank is not None:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets))
    if args.evaluate is not None:
        model.eval()
        tokens = torch.randint(model.config.vocab_size, (args.batch, args.seq))
        losses = []
        with torch.set_grad_enabled(args.evaluate == "grad"):
            for _ in range(args.steps):
                losses.append(model(input_ids=tokens, labels=tokens).loss.item())
        print(json.dumps({"losses": losses}))
        return
    model.train()
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=1e-4)
    tokens = torch.randint(model.config.vocab_size, (args.batch, args.seq))
    for _ in range(args.steps):
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    print(json.dumps({
        "parameter_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "trained_bytes": sum(p.numel() * p.element_size() for p in trained),
    }))


if __name__ == "__main__":
    main()
