"""The model families the capture is tested on, built from configs as their users build
them (nothing downloaded), each with the data it trains on (tests/ecosystem/make_data.py).
`FAMILIES[name] = (expression, data)`: the expression makes the model in this module."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import timm  # noqa: E402
import torchvision  # noqa: E402
import transformers  # noqa: E402

from gnmt import GNMT  # noqa: E402,F401
from pipetrain_capture import named_inputs  # noqa: E402
from llama_ref import Args, Transformer  # noqa: E402,F401
from nanogpt_mask import NanoGPT  # noqa: E402,F401
from residual_mlp import ResidualMLP  # noqa: E402,F401
from unet_shared import UNetClassifier  # noqa: E402,F401

transformers.logging.set_verbosity_error()


def hf_gpt2():
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=3, n_embd=48, n_head=2, vocab_size=256, n_positions=64, bos_token_id=0, eos_token_id=0))


def hf_llama():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=48, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=256, max_position_embeddings=64, bos_token_id=0, eos_token_id=0))


def hf_mixtral():
    """A mixture of experts (transformers 5's experts interface; the capture runs them as
    batched_mm, since grouped_mm calls an operator registered in Python)."""
    return transformers.MixtralForCausalLM(transformers.MixtralConfig(
        hidden_size=48, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        num_local_experts=4, num_experts_per_tok=2, vocab_size=256, max_position_embeddings=64, bos_token_id=0,
        eos_token_id=0))


def hf_bert():
    return transformers.BertForSequenceClassification(transformers.BertConfig(
        hidden_size=48, intermediate_size=96, num_hidden_layers=3, num_attention_heads=2, vocab_size=256,
        max_position_embeddings=64, num_labels=4))


def hf_t5():
    """An encoder-decoder: every decoder block reads the encoder's states, and the first
    block of each stack hands on its position bias beside its hidden states (a layer with
    two outputs)."""
    return transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=256, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))


def timm_vit():
    return timm.create_model("vit_tiny_patch16_224", img_size=28, patch_size=7, num_classes=10, depth=4)


def timm_resnet():
    return timm.create_model("resnet18", num_classes=10)


def timm_efficientnet():
    """timm's EfficientNet (TinyNet-E: B0's blocks at half the width), with stochastic
    depth as it is trained (drop_path_rate) and its head's dropout."""
    return timm.create_model("tinynet_e", num_classes=10, drop_path_rate=0.1)


def tv_googlenet():
    """torchvision's GoogLeNet with its two auxiliary classifiers, which it returns beside
    its logits in training mode: pipetrain trains the logits and leaves them out."""
    return torchvision.models.googlenet(num_classes=10, aux_logits=True, init_weights=True)


FAMILIES = {
    "hf-gpt2": ("hf_gpt2()", "fortunes"),
    "hf-llama": ("hf_llama()", "fortunes"),
    "hf-bert": ("hf_bert()", "fortunes_classes"),
    "hf-mixtral": ("hf_mixtral()", "fortunes"),
    "timm-vit": ("timm_vit()", "fmnist_rgb"),
    "timm-resnet": ("timm_resnet()", "fmnist_rgb"),
    "llama-ref": ("Transformer(Args(n_layers=3))", "fortunes"),
    "nanogpt": ("NanoGPT(layers=3)", "fortunes"),
    "unet": ("UNetClassifier()", "fmnist_rgb"),
    "residual-mlp": ("ResidualMLP(inputs=3 * 28 * 28)", "fmnist_rgb"),
    "timm-efficientnet": ("timm_efficientnet()", "fmnist_rgb"),
    "gnmt": ("GNMT()", "fortunes"),
    "tv-googlenet": ("tv_googlenet()", "fmnist_rgb"),
}


# Families whose data holds inputs by name (input_ids, a padding mask, the decoder's
# inputs): trained by tests/cli/named_inputs_test.sh.
NAMED = {
    "hf-bert-mask": ("hf_bert()", "fortunes_classes_masked"),
    "hf-llama-mask": ("hf_llama()", "fortunes_masked"),
    "hf-t5": ("hf_t5()", "fortunes_seq2seq"),
}


def make(name):
    return eval({**FAMILIES, **NAMED}[name][0])


def inputs_of(data, split=""):
    """A data file's inputs for forward(): the one tensor, or its inputs by name (keyword
    arguments); `split` "test_" for the test split's."""
    names = named_inputs(data)
    return ((), {k: data[f"{split}{k}"] for k in names}) if names else ((data[f"{split}inputs"],), {})
