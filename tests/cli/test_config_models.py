"""Models built from Hugging Face configs: `export` writes checker-clean ONNX, and the file fed
back gives exactly the prediction of `--config`."""
import glob
import json
import os
import subprocess
import tempfile
import unittest

from cli_util import SOURCE, fixture, run, run_json

CONFIGS = sorted(glob.glob(fixture("model_configs", "*.json")))
GPU = fixture("device_configs", "Tesla_V100-PCIE-32GB.json")
PYTHON = "/usr/bin/python3"
LLAMA = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816, "num_attention_heads": 16,
         "num_key_value_heads": 4, "num_hidden_layers": 4, "rms_norm_eps": 1e-5, "vocab_size": 32000,
         "max_position_embeddings": 4096, "hidden_act": "silu"}
# gpt-oss's structure, small: MXFP4 experts (QMoE), biases, alternating sliding-window layers.
GPT_OSS = {"model_type": "gpt_oss", "hidden_size": 256, "intermediate_size": 256, "num_attention_heads": 8,
           "num_key_value_heads": 2, "head_dim": 32, "num_hidden_layers": 4, "num_local_experts": 8,
           "experts_per_token": 2, "vocab_size": 1000, "sliding_window": 16, "attention_bias": True,
           "layer_types": ["sliding_attention", "full_attention"] * 2, "rms_norm_eps": 1e-5, "hidden_act": "silu",
           "quantization_config": {"quant_method": "mxfp4"}}
# Gemma 3's structure, small: sandwich norms, q/k norms, scaled embedding, GeGLU, 2 local layers to 1 global.
GEMMA3 = {"model_type": "gemma3_text", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
          "num_key_value_heads": 1, "head_dim": 64, "num_hidden_layers": 6, "vocab_size": 1000, "sliding_window": 16,
          "sliding_window_pattern": 3, "hidden_activation": "gelu_pytorch_tanh"}
# Gemma 2's structure, small: sandwich norms, soft-capped scores and logits, every other layer local.
GEMMA2 = {"model_type": "gemma2", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 4, "vocab_size": 1000, "sliding_window": 16,
          "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "hidden_act": "gelu_pytorch_tanh"}
# Phi-2's structure, small: LayerNorms, partial rotary, attention and MLP in parallel, biases.
PHI = {"model_type": "phi", "hidden_size": 256, "intermediate_size": 1024, "num_attention_heads": 4,
       "num_hidden_layers": 2, "vocab_size": 1000, "partial_rotary_factor": 0.4, "hidden_act": "gelu_new"}
# GPT-NeoX's structure, small: fused QKV, two LayerNorms in parallel, a quarter of each head rotated.
NEOX = {"model_type": "gpt_neox", "hidden_size": 256, "intermediate_size": 1024, "num_attention_heads": 4,
        "num_hidden_layers": 2, "vocab_size": 1000, "rotary_pct": 0.25, "hidden_act": "gelu",
        "use_parallel_residual": True}
# GPT-J's structure, small: one LayerNorm for attention and MLP in parallel, rotary_dim of each head.
GPTJ = {"model_type": "gptj", "n_embd": 256, "n_head": 4, "n_layer": 2, "n_inner": None, "rotary_dim": 16,
        "vocab_size": 1000, "activation_function": "gelu_new", "tie_word_embeddings": False}
# Falcon 40B's structure, small: fused [q | k | v] with grouped KV heads, two LayerNorms in parallel, no biases.
FALCON = {"model_type": "falcon", "hidden_size": 256, "num_attention_heads": 8, "num_kv_heads": 2,
          "num_hidden_layers": 2, "vocab_size": 1000, "new_decoder_architecture": True, "bias": False,
          "parallel_attn": True, "alibi": False}
# StarCoder2's structure, small: GQA, LayerNorms, biases everywhere, a dense MLP, sliding window on every layer.
STARCODER2 = {"model_type": "starcoder2", "hidden_size": 256, "intermediate_size": 1024, "num_attention_heads": 4,
              "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000, "sliding_window": 64,
              "use_bias": True, "norm_epsilon": 1e-5, "hidden_act": "gelu_pytorch_tanh"}
# Flan-T5's structure, small: encoder-decoder, relative position bias, gated-GELU feed-forward, untied head.
FLAN_T5 = {"model_type": "t5", "d_model": 128, "d_kv": 32, "d_ff": 256, "num_heads": 4, "num_layers": 2,
           "num_decoder_layers": 3, "vocab_size": 1000, "feed_forward_proj": "gated-gelu",
           "tie_word_embeddings": False}
T5_ENCODER = dict(FLAN_T5, architectures=["T5EncoderModel"])
# Whisper's structure, small: two convolutions over log-mel frames (50 positions), an encoder
# and a decoder with cross-attention, learned decoder positions, the head tied.
WHISPER = {"model_type": "whisper", "d_model": 64, "encoder_layers": 2, "decoder_layers": 2,
           "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 128,
           "decoder_ffn_dim": 128, "vocab_size": 500, "num_mel_bins": 16, "max_source_positions": 50,
           "max_target_positions": 448}
# A GPTQ checkpoint's config, small: 4-bit layers (MatMulNBits), asymmetric groups of 32.
LLAMA_GPTQ = dict(LLAMA, quantization_config={"quant_method": "gptq", "bits": 4, "group_size": 32, "sym": False})
# BLOOM's and MPT's structure, small: ALiBi, a normed embedding (BLOOM), no biases (MPT).
BLOOM = {"model_type": "bloom", "hidden_size": 128, "n_head": 4, "n_layer": 2, "vocab_size": 1000}
MPT = {"model_type": "mpt", "d_model": 128, "n_heads": 4, "n_layers": 2, "vocab_size": 1000, "no_bias": True,
       "attn_config": {"alibi": True}}
# Granite's scales and Cohere's parallel SwiGLU block with per-head LayerNorms, small.
GRANITE = dict(LLAMA, model_type="granite", embedding_multiplier=12.0, residual_multiplier=0.22, logits_scaling=8.0)
COHERE2 = {"model_type": "cohere2", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
           "num_key_value_heads": 2, "num_hidden_layers": 4, "vocab_size": 1000, "sliding_window": 16}
COHERE = {"model_type": "cohere", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
          "num_hidden_layers": 2, "vocab_size": 1000, "use_qk_norm": True}
# StarCoder's structure, small: learned positions, one KV head.
BIGCODE = {"model_type": "gpt_bigcode", "n_embd": 256, "n_head": 4, "n_layer": 2, "n_positions": 512,
           "vocab_size": 1000, "multi_query": True}
# OLMo 2's post-norms with whole-projection q/k norms, Nemotron's squared ReLU, InternLM2's wqkv, small.
OLMO2 = dict(LLAMA, model_type="olmo2", num_key_value_heads=16)
NEMOTRON = dict(LLAMA, model_type="nemotron", hidden_act="relu2", partial_rotary_factor=0.5)
INTERNLM2 = dict(LLAMA, model_type="internlm2")
# OLMoE's and Phi-3.5-MoE's mixtures, small.
OLMOE = dict(LLAMA, model_type="olmoe", num_key_value_heads=16, num_experts=8, num_experts_per_tok=2, intermediate_size=256)
PHIMOE = dict(LLAMA, model_type="phimoe", num_local_experts=4, num_experts_per_tok=2)
# DeepSeek-V3's structure, small: multi-head latent attention, a dense first layer, routed and shared experts.
DEEPSEEK = {"model_type": "deepseek_v3", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
            "num_key_value_heads": 4, "num_hidden_layers": 3, "vocab_size": 1000, "q_lora_rank": 64,
            "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
            "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64, "n_shared_experts": 1,
            "first_k_dense_replace": 1, "hidden_act": "silu"}
# GLM-4.5's structure, small: DeepSeek-V3's mixture under grouped-query attention with biased q/k/v,
# per-head q/k norms and half-head rotary; Kimi K2 as DeepSeek-V3.
GLM4_MOE = {"model_type": "glm4_moe", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 8,
            "num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 3, "vocab_size": 1000,
            "attention_bias": True, "use_qk_norm": True, "partial_rotary_factor": 0.5, "n_routed_experts": 8,
            "num_experts_per_tok": 2, "moe_intermediate_size": 64, "n_shared_experts": 1,
            "first_k_dense_replace": 1, "num_nextn_predict_layers": 1}
KIMI_K2 = dict(DEEPSEEK, model_type="kimi_k2")
# Llama 4's structure, small, as a llama4 config's text_config: chunked rotary layers with
# unweighted q/k norms, a global NoPE layer with the query temperature, experts beside a shared
# one every second layer, dense MLPs between.
LLAMA4 = {"model_type": "llama4", "text_config": {
    "model_type": "llama4_text", "hidden_size": 256, "intermediate_size": 128, "intermediate_size_mlp": 512,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "vocab_size": 1000, "num_local_experts": 4, "interleave_moe_layer_step": 2, "attention_chunk_size": 64},
    # a small vision model: 2 x 2 tiles of 32 and a global one for the 448 default, 4 x 4 patches
    # pixel-shuffled to 2 x 2 tokens a tile
    "vision_config": {"hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                      "image_size": 32, "patch_size": 8, "projector_input_dim": 128, "projector_output_dim": 128}}
# GLM-4's sandwich norms with a fused gate_up GEMM, SmolLM3's NoPE layers, small.
GLM4 = dict(LLAMA, model_type="glm4", num_key_value_heads=4)
SMOLLM3 = dict(LLAMA, model_type="smollm3", tie_word_embeddings=True)
GLM = dict(LLAMA, model_type="glm", num_key_value_heads=4)
OLMO3 = dict(LLAMA, model_type="olmo3", num_key_value_heads=16, sliding_window=64)
SEED_OSS = dict(LLAMA, model_type="seed_oss", attention_out_bias=True)
ARCEE = dict(LLAMA, model_type="arcee")
ERNIE = dict(LLAMA, model_type="ernie4_5", use_bias=True)
STABLELM = dict(LLAMA, model_type="stablelm", use_qkv_bias=True, qk_layernorm=True, use_parallel_residual=True)
# EXAONE 4.0's post-norms with a local/global pattern, small.
EXAONE4 = dict(LLAMA, model_type="exaone4", num_hidden_layers=4, sliding_window=32, sliding_window_pattern="LLLG")
# LLaVA with a small CLIP tower: 16 image tokens among each sequence's.
LLAVA = {"model_type": "llava", "text_config": dict(LLAMA, model_type="llama"),
         "vision_config": {"model_type": "clip_vision_model", "hidden_size": 128, "intermediate_size": 256,
                           "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 64, "patch_size": 16}}
# LLaVA-NeXT: the same tower on a 2 x 2 grid of crops and the whole image (16 + 8 x 9 tokens).
LLAVA_NEXT = dict(LLAVA, model_type="llava_next", image_grid_pinpoints=[[128, 64], [128, 128]])
# Gemma 3 with a small SigLIP tower whose 4 x 4 patches are average-pooled to 2 x 2 image tokens.
GEMMA3_VL = {"model_type": "gemma3", "mm_tokens_per_image": 4,
             "text_config": dict(GEMMA3, model_type="gemma3_text"),
             "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 128, "intermediate_size": 256,
                               "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 64, "patch_size": 16}}
# Qwen2-VL and Qwen2.5-VL with small towers (Qwen2.5-VL: windows but in layer 1) on the default
# 448-pixel image (256 tokens).
QWEN2_VL = {"model_type": "qwen2_vl", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
            "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000,
            "vision_config": {"depth": 2, "embed_dim": 128, "hidden_size": 256, "num_heads": 4, "mlp_ratio": 2}}
QWEN25_VL = dict(QWEN2_VL, model_type="qwen2_5_vl",
                 vision_config={"depth": 3, "hidden_size": 128, "intermediate_size": 200, "num_heads": 4,
                                "out_hidden_size": 256, "window_size": 112, "fullatt_block_indexes": [1]})
# Qwen3-VL with a small tower: interpolated positions (a 4 x 4 table), DeepStack after layer 0.
QWEN3_VL = {"model_type": "qwen3_vl",
            "text_config": {"model_type": "qwen3_vl_text", "hidden_size": 256, "intermediate_size": 512,
                            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "num_hidden_layers": 2,
                            "vocab_size": 1000},
            "vision_config": {"depth": 2, "hidden_size": 128, "intermediate_size": 256, "num_heads": 4,
                              "out_hidden_size": 256, "num_position_embeddings": 16, "deepstack_visual_indexes": [0]}}
# Mistral 3 with a small Pixtral tower (the default 448-pixel image: 16 x 16 tokens).
MISTRAL3 = {"model_type": "mistral3", "text_config": dict(LLAMA, model_type="mistral"),
            "vision_config": {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
                              "num_attention_heads": 4, "patch_size": 14, "image_size": 1540}}
# PaliGemma with a small SigLIP tower (no class token, one projection) before Gemma.
PALIGEMMA = {"model_type": "paligemma",
             "text_config": {"model_type": "gemma", "hidden_size": 256, "intermediate_size": 512,
                             "num_attention_heads": 4, "num_key_value_heads": 1, "num_hidden_layers": 2,
                             "vocab_size": 1000},
             "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 128, "intermediate_size": 256,
                               "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 64, "patch_size": 16}}
# Mamba-2 and Nemotron-H (Mamba-2 mixers, attention and MLP blocks), small: their scans run as
# ai.neusight ops, which onnx.checker accepts under their domain's opset import.
MAMBA2 = {"model_type": "mamba2", "hidden_size": 256, "num_hidden_layers": 2, "num_heads": 8, "head_dim": 64,
          "state_size": 64, "n_groups": 2, "vocab_size": 1000, "chunk_size": 64}
NEMOTRON_H = {"model_type": "nemotron_h", "hidden_size": 256, "num_hidden_layers": 4, "hybrid_override_pattern": "M*M-",
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 512,
              "mamba_num_heads": 8, "mamba_head_dim": 64, "ssm_state_size": 64, "mamba_n_groups": 2, "vocab_size": 1000}
QWEN3_NEXT = {"model_type": "qwen3_next", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000,
              "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
              "shared_expert_intermediate_size": 64, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
              "linear_key_head_dim": 32, "linear_value_head_dim": 32}
GRANITE_H = {"model_type": "granitemoehybrid", "hidden_size": 256, "intermediate_size": 128, "num_hidden_layers": 4,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
             "layer_types": ["mamba", "attention", "mamba", "mamba"], "position_embedding_type": "nope",
             "mamba_n_heads": 8, "mamba_d_head": 32, "mamba_d_state": 32, "num_local_experts": 4,
             "num_experts_per_tok": 2, "shared_intermediate_size": 256}
VIT = {"model_type": "vit", "architectures": ["ViTForImageClassification"], "hidden_size": 192,
       "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 768, "image_size": 64, "patch_size": 16,
       "num_labels": 10}
CLIP = {"model_type": "clip", "architectures": ["CLIPModel"], "projection_dim": 64,
        "text_config": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                        "vocab_size": 1000, "max_position_embeddings": 16},
        "vision_config": {"hidden_size": 96, "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 3,
                          "image_size": 64, "patch_size": 16}}
SIGLIP = {"model_type": "siglip", "text_config": {"hidden_size": 96, "intermediate_size": 128, "num_hidden_layers": 2,
                                                  "num_attention_heads": 2, "vocab_size": 1000},
          "vision_config": {"hidden_size": 96, "intermediate_size": 192, "num_hidden_layers": 2,
                            "num_attention_heads": 3, "image_size": 64, "patch_size": 16}}
# DeBERTa (v1), DeiT and DINOv2 as their checkpoints' configs (tests/data) give them, with the
# dims each takes: token encoders --batch and --seq, image encoders --batch alone.
CHECKPOINT_CONFIGS = (("deberta_base", ("--batch", "2", "--seq", "128"), "batch sequence"),
                      ("deit_base_distilled", ("--batch", "2"), "batch"),
                      ("dinov2_base", ("--batch", "2"), "batch"))
GPT3_175B = {"model_type": "gpt2", "n_embd": 12288, "n_head": 96, "n_layer": 96, "n_positions": 2048,
             "vocab_size": 50257, "activation_function": "gelu_new"}


def check_onnx(path):
    """Runs onnx.checker (the reference tool) on a file; returns (ok, message)."""
    p = subprocess.run([PYTHON, "-c", "import onnx,sys; onnx.checker.check_model(sys.argv[1]);"
                        "m=onnx.load(sys.argv[1], load_external_data=False);"
                        "print(' '.join(d.dim_param for d in m.graph.input[0].type.tensor_type.shape.dim))", path],
                       capture_output=True, text=True, timeout=300)
    return p.returncode == 0, (p.stdout + p.stderr).strip()


def batch_seq(cfg):
    return ("2", "128") if "bert" in cfg or "switch" in cfg else ("1", "256")


class ConfigModels(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def configs(self):
        self.assertTrue(CONFIGS, "no configs under " + fixture("model_configs"))
        made = []
        for name, cfg in (("llama_gqa", LLAMA), ("gpt_oss_small", GPT_OSS), ("gemma3_small", GEMMA3),
                          ("gemma2_small", GEMMA2), ("phi_small", PHI), ("neox_small", NEOX),
                          ("deepseek_small", DEEPSEEK), ("gptj_small", GPTJ), ("falcon_small", FALCON),
                          ("starcoder2_small", STARCODER2), ("flan_t5_small", FLAN_T5), ("t5_encoder_small", T5_ENCODER),
                          ("whisper_small", WHISPER),
                          ("llama_gptq", LLAMA_GPTQ), ("bloom_small", BLOOM), ("mpt_small", MPT),
                          ("granite_small", GRANITE), ("cohere_small", COHERE), ("cohere2_small", COHERE2),
                          ("bigcode_small", BIGCODE), ("olmo2_small", OLMO2), ("nemotron_small", NEMOTRON),
                          ("internlm2_small", INTERNLM2), ("olmoe_small", OLMOE), ("phimoe_small", PHIMOE),
                          ("glm4_moe_small", GLM4_MOE), ("kimi_k2_small", KIMI_K2), ("llama4_small", LLAMA4),
                          ("glm4_small", GLM4), ("smollm3_small", SMOLLM3), ("exaone4_small", EXAONE4),
                          ("glm_small", GLM), ("olmo3_small", OLMO3), ("seed_oss_small", SEED_OSS),
                          ("arcee_small", ARCEE), ("ernie_small", ERNIE), ("stablelm_small", STABLELM),
                          ("qwen3_vl_small", QWEN3_VL), ("llava_small", LLAVA), ("llava_next_small", LLAVA_NEXT), ("paligemma_small", PALIGEMMA),
                          ("qwen2_vl_small", QWEN2_VL), ("mistral3_small", MISTRAL3), ("gemma3_vl_small", GEMMA3_VL), ("qwen25_vl_small", QWEN25_VL),
                          ("mamba2_small", MAMBA2), ("nemotron_h_small", NEMOTRON_H),
                          ("qwen3_next_small", QWEN3_NEXT), ("granite_h_small", GRANITE_H)):
            made.append(os.path.join(self.dir, name + ".json"))
            with open(made[-1], "w") as f:
                json.dump(cfg, f)
        return CONFIGS + made

    def test_export_passes_checker_and_matches_config_prediction(self):
        for cfg in self.configs():
            name = os.path.splitext(os.path.basename(cfg))[0]
            with self.subTest(config=name):
                out = os.path.join(self.dir, name + ".onnx")
                code, so, se = run("export", "--config", cfg, "-o", out)
                self.assertEqual(code, 0, se)
                self.assertTrue(os.path.exists(os.path.join(self.dir, name + ".weights")))
                ok, msg = check_onnx(out)
                self.assertTrue(ok, msg)
                self.assertEqual(msg.splitlines()[-1], "batch sequence")
                b, s = batch_seq(name)
                for mode in ("inference", "training"):
                    via_cfg = run_json("--config", cfg, "--batch", b, "--seq", s, "--gpu", GPU, "--mode", mode)
                    via_file = run_json(out, "--batch", b, "--seq", s, "--gpu", GPU, "--mode", mode)
                    self.assertGreater(via_cfg["e2e_latency_ms"], 0)
                    self.assertEqual(via_cfg["e2e_latency_ms"], via_file["e2e_latency_ms"])
                    self.assertEqual([n["latency_ms"] for n in via_cfg["nodes"]],
                                     [n["latency_ms"] for n in via_file["nodes"]])
                    self.assertFalse([n["name"] for n in via_cfg["nodes"]
                                      if any(k["class"] == "unknown" for k in n["kernels"])])

    def export(self, name, config):
        """Writes `config` as NAME.json and exports it to NAME.onnx; returns both paths."""
        cfg = os.path.join(self.dir, name + ".json")
        with open(cfg, "w") as f:
            json.dump(config, f)
        out = os.path.join(self.dir, name + ".onnx")
        code, so, se = run("export", "--config", cfg, "-o", out)
        self.assertEqual(code, 0, se)
        return cfg, out

    def test_image_size_resizes_qwen_images_and_is_an_error_elsewhere(self):
        cfg, _ = self.export("qwen25_image", QWEN25_VL)
        # 300 x 500 pixels: smart_resize to 308 x 504, 22 x 36 patches, 11 x 18 = 198 tokens.
        code, so, se = run("--config", cfg, "--batch", "1", "--seq", "198", "--gpu", GPU, "--image-size", "300x500",
                           "--quiet")
        self.assertEqual(code, 0, se)
        self.assertIn("308 x 504 pixels as its processor resizes it (--image-size), whose 198 tokens", se)
        code, so, se = run("--config", cfg, "--batch", "1", "--seq", "197", "--gpu", GPU, "--image-size", "300x500")
        self.assertEqual(code, 2)
        self.assertIn("holds its image's 198 tokens", se)
        out = os.path.join(self.dir, "qwen25_308x504.onnx")
        code, so, se = run("export", "--config", cfg, "--image-size", "300x500", "-o", out)
        self.assertEqual(code, 0, se)
        ok, msg = check_onnx(out)
        self.assertTrue(ok, msg)
        # --images: three images a sequence, 3 x 198 tokens; the export's pixel_values hold them.
        code, so, se = run("--config", cfg, "--batch", "1", "--seq", "594", "--gpu", GPU, "--image-size", "300x500",
                           "--images", "3", "--quiet")
        self.assertEqual(code, 0, se)
        self.assertIn("3 images per sequence (--images)", se)
        self.assertIn("whose 594 tokens", se)
        code, so, se = run("--config", cfg, "--batch", "1", "--seq", "593", "--gpu", GPU, "--image-size", "300x500",
                           "--images", "3")
        self.assertEqual(code, 2)
        self.assertIn("holds its 3 images' 594 tokens", se)
        out3 = os.path.join(self.dir, "qwen25_3_images.onnx")
        code, so, se = run("export", "--config", cfg, "--image-size", "300x500", "--images", "3", "-o", out3)
        self.assertEqual(code, 0, se)
        ok, msg = check_onnx(out3)
        self.assertTrue(ok, msg)
        for bad in (["--images", "0"], ["--images", "2"]):
            target = cfg if bad[1] == "0" else self.export("llama_images", LLAMA)[0]
            code, so, se = run("--config", target, "--batch", "1", "--seq", "600", "--gpu", GPU, *bad)
            self.assertEqual(code, 2, se)
            self.assertEqual(len(se.strip().splitlines()), 1, se)
        llava, _ = self.export("llava_image", LLAVA)
        for bad, needle in (([llava], "take"), ([cfg, "--image-size", "0x5"], "positive"),
                            ([cfg, "--image-size", "big"], "HEIGHTxWIDTH")):
            code, so, se = run("--config", *bad[:1], "--batch", "1", "--seq", "300", "--gpu", GPU,
                               *(bad[1:] or ["--image-size", "448"]))
            self.assertEqual(code, 2, se)
            self.assertEqual(len(se.strip().splitlines()), 1, se)
            self.assertIn(needle, se)

    def test_vit_is_an_image_encoder_bound_by_the_batch_alone(self):
        cfg, out = self.export("vit_small", VIT)
        ok, msg = check_onnx(out)
        self.assertTrue(ok, msg)
        self.assertEqual(msg.splitlines()[-1], "batch")  # pixel_values [batch, 3, 64, 64]
        for mode in ("inference", "training"):
            via_cfg = run_json("--config", cfg, "--batch", "4", "--gpu", GPU, "--mode", mode)
            via_file = run_json(out, "--batch", "4", "--gpu", GPU, "--mode", mode)
            self.assertGreater(via_cfg["e2e_latency_ms"], 0)
            self.assertEqual(via_cfg["e2e_latency_ms"], via_file["e2e_latency_ms"])
            self.assertEqual(via_cfg["graph_outputs"][0]["shape"], [4, 10])
            self.assertFalse([n["name"] for n in via_cfg["nodes"] if any(k["class"] == "unknown" for k in n["kernels"])])
        code, so, se = run("--config", cfg, "--gpu", GPU)
        self.assertEqual(code, 2)
        self.assertEqual(se.strip().splitlines(), ["neusight-onnx: error: --config of a vit model (an image encoder) needs --batch N"])

    def test_deberta_deit_and_dinov2_checkpoint_configs_predict_and_export(self):
        for name, dims, inputs in CHECKPOINT_CONFIGS:
            with self.subTest(config=name):
                cfg = os.path.join(SOURCE, "tests", "data", name + ".json")
                report = run_json("--config", cfg, *dims, "--gpu", "h100")
                self.assertTrue(report["nodes"])
                self.assertGreater(report["e2e_latency_ms"], 0)
                self.assertFalse([n["name"] for n in report["nodes"] if any(k["class"] == "unknown" for k in n["kernels"])])
                out = os.path.join(self.dir, name + ".onnx")
                code, so, se = run("export", "--config", cfg, "-o", out)
                self.assertEqual(code, 0, se)
                ok, msg = check_onnx(out)
                self.assertTrue(ok, msg)
                self.assertEqual(msg.splitlines()[-1], inputs)
                self.assertEqual(run_json(out, *dims, "--gpu", "h100")["e2e_latency_ms"], report["e2e_latency_ms"])
        # DINOv2 on its processor's 224 x 224 crop: 16 x 16 patches and the class token, the
        # positions resized to that grid; sides that are not whole patches are an input error.
        dinov2 = os.path.join(SOURCE, "tests", "data", "dinov2_base.json")
        crop = run_json("--config", dinov2, "--batch", "2", "--image-size", "224", "--gpu", "h100")
        self.assertEqual(crop["graph_outputs"][0]["shape"], [2, 257, 768])
        out = os.path.join(self.dir, "dinov2_224.onnx")
        code, so, se = run("export", "--config", dinov2, "--image-size", "224", "-o", out)
        self.assertEqual(code, 0, se)
        ok, msg = check_onnx(out)
        self.assertTrue(ok, msg)
        code, so, se = run("--config", dinov2, "--batch", "2", "--image-size", "225", "--gpu", "h100")
        self.assertEqual(code, 2)
        self.assertEqual(len(se.strip().splitlines()), 1, se)
        self.assertIn("patch_size", se)
        # DeBERTa with absolute positions beside the relative ones (DebertaConfig's default
        # position_biased_input): both take the sequence's arange; the export stays checker-clean.
        with open(os.path.join(SOURCE, "tests", "data", "deberta_base.json")) as f:
            config = json.load(f)
        cfg, out = self.export("deberta_absolute", dict(config, position_biased_input=True, num_hidden_layers=2))
        ok, msg = check_onnx(out)
        self.assertTrue(ok, msg)
        # DeBERTa with talking heads is not built: one line, no output.
        talking = os.path.join(self.dir, "deberta_talking.json")
        with open(talking, "w") as f:
            json.dump(dict(config, talking_head=True), f)
        code, so, se = run("--config", talking, "--batch", "2", "--seq", "128", "--gpu", "h100")
        self.assertEqual(code, 2)
        self.assertEqual(len(se.strip().splitlines()), 1, se)
        self.assertIn("talking_head", se)

    def test_clip_and_siglip_compare_a_batch_of_texts_with_a_batch_of_images(self):
        # The two towers: --batch N images and N texts of --seq tokens, logits [N, N]; the image
        # tower alone (CLIPVisionModelWithProjection, SiglipVisionModel) is bound by --batch.
        vision = dict(CLIP["vision_config"], model_type="clip_vision_model",
                      architectures=["CLIPVisionModelWithProjection"], projection_dim=32)
        siglip_vision = dict(SIGLIP["vision_config"], model_type="siglip_vision_model")
        text = dict(CLIP["text_config"], model_type="clip_text_model", architectures=["CLIPTextModelWithProjection"],
                    projection_dim=48)
        for name, config, args, shape in (("clip_small", CLIP, ("--seq", "16"), [3, 3]),
                                          ("siglip_small", SIGLIP, ("--seq", "16"), [3, 3]),
                                          ("clip_vision_small", vision, (), [3, 32]),
                                          ("siglip_vision_small", siglip_vision, (), [3, 96]),
                                          ("clip_text_small", text, ("--seq", "16"), [3, 48])):
            with self.subTest(config=name):
                cfg, out = self.export(name, config)
                ok, msg = check_onnx(out)
                self.assertTrue(ok, msg)
                for mode in ("inference", "training"):
                    via_cfg = run_json("--config", cfg, "--batch", "3", *args, "--gpu", GPU, "--mode", mode)
                    via_file = run_json(out, "--batch", "3", *args, "--gpu", GPU, "--mode", mode)
                    self.assertGreater(via_cfg["e2e_latency_ms"], 0)
                    self.assertEqual(via_cfg["e2e_latency_ms"], via_file["e2e_latency_ms"])
                    self.assertEqual(via_cfg["graph_outputs"][0]["shape"], shape)
                    self.assertFalse([n["name"] for n in via_cfg["nodes"]
                                      if any(k["class"] == "unknown" for k in n["kernels"])])
        code, so, se = run("--config", os.path.join(self.dir, "clip_small.json"), "--batch", "3", "--gpu", GPU)
        self.assertEqual(code, 2)
        self.assertEqual(len(se.strip().splitlines()), 1, se)

    def test_a_sequence_beyond_the_learned_positions_is_an_input_error(self):
        # PyTorch's position lookup fails beyond the table: --seq, and --generate's prompt and new
        # tokens together, say so in one line instead of predicting a model that cannot run.
        cfg, _ = self.export("clip_positions", CLIP)  # 16 positions
        code, so, se = run("--config", cfg, "--batch", "2", "--seq", "17", "--gpu", GPU)
        self.assertEqual(code, 2)
        self.assertEqual(se.strip().splitlines(),
                         ["neusight-onnx: error: --seq 17: a clip model has learned positions for 16 tokens "
                          "(its config's position table)"])
        self.assertGreater(run_json("--config", cfg, "--batch", "2", "--seq", "16", "--gpu", GPU)["e2e_latency_ms"], 0)
        bigcode = dict(BIGCODE, n_positions=64)
        cfg, _ = self.export("bigcode_positions", bigcode)
        code, so, se = run("--config", cfg, "--batch", "1", "--generate", "48:17", "--gpu", GPU)
        self.assertEqual(code, 2)
        self.assertEqual(se.strip().splitlines(),
                         ["neusight-onnx: error: --generate: 48 + 17 tokens outgrow the model's 64 learned positions"])
        code, so, se = run("--config", cfg, "--batch", "1", "--generate", "48:16", "--gpu", GPU)
        self.assertEqual(code, 0, se)

    def test_gpt3_175b_builds_instantly_without_weights(self):
        cfg, out = self.export("gpt3_175b", GPT3_175B)
        self.assertLess(os.path.getsize(out), 50 << 20)
        self.assertEqual(os.path.getsize(os.path.join(self.dir, "gpt3_175b.weights")), 0)
        r = run_json("--config", cfg, "--batch", "1", "--seq", "2048", "--gpu", GPU)
        self.assertGreater(r["e2e_latency_ms"], 0)

    def test_bad_configs_are_input_errors_without_output(self):
        bad_type = os.path.join(self.dir, "bad_type.json")
        with open(bad_type, "w") as f:
            json.dump({"model_type": "mamba", "hidden_size": 8}, f)
        missing = os.path.join(self.dir, "missing_field.json")
        with open(missing, "w") as f:
            json.dump({"model_type": "opt", "hidden_size": 64}, f)
        out = os.path.join(self.dir, "never.onnx")
        for cfg in (bad_type, missing, os.path.join(self.dir, "absent.json")):
            with self.subTest(config=os.path.basename(cfg)):
                code, so, se = run("export", "--config", cfg, "-o", out)
                self.assertEqual(code, 2)
                self.assertEqual(len(se.strip().splitlines()), 1, se)
                self.assertIn(os.path.basename(cfg), se)
                self.assertFalse(os.path.exists(out))
                code, so, se = run("--config", cfg, "--batch", "1", "--seq", "8", "--gpu", GPU)
                self.assertEqual(code, 2)
                self.assertEqual(len(se.strip().splitlines()), 1, se)
        code, so, se = run("export", "--config", CONFIGS[0])
        self.assertEqual(code, 2)
        self.assertIn("-o", se)

    def test_half_precision_checkpoint_is_fp32_with_a_note_unless_dtype_is_given(self):
        # PyTorch's from_pretrained loads FP32 whatever torch_dtype says; the report says so
        # and names the flag. The shared Switch config says bfloat16, its measured runs are FP32.
        cfg = os.path.join(self.dir, "llama_bf16.json")
        with open(cfg, "w") as f:
            json.dump(dict(LLAMA, torch_dtype="bfloat16"), f)
        args = ("--config", cfg, "--batch", "1", "--seq", "64", "--gpu", "h100")
        fp32 = run_json(*args)
        self.assertEqual(fp32["dtype"], "fp32")
        notes = [w for w in fp32["warnings"] if "bfloat16" in w]
        self.assertEqual(len(notes), 1, fp32["warnings"])
        self.assertIn("--dtype bf16", notes[0])
        code, so, se = run(*args, "--quiet")
        self.assertEqual(code, 0)
        self.assertIn("--dtype bf16", se)
        bf16 = run_json(*args, "--dtype", "bf16")
        self.assertEqual(bf16["dtype"], "bf16")
        self.assertFalse([w for w in bf16["warnings"] if "bfloat16" in w])
        # The GEMMs run on tensor cores; at 64 tokens of a small model the whole run is set by
        # kernel launches, which BF16 adds to (the RMSNorms' casts to FP32 and back).
        self.assertLess(bf16["totals_by_class_ms"]["gemm"], fp32["totals_by_class_ms"]["gemm"])
        plain = os.path.join(self.dir, "llama_plain.json")
        with open(plain, "w") as f:
            json.dump(LLAMA, f)
        self.assertFalse([w for w in run_json("--config", plain, "--batch", "1", "--seq", "64", "--gpu", "h100")["warnings"]
                          if "stores its weights" in w])

    def test_quantized_checkpoints_run_4_bit_layers_or_say_they_do_not(self):
        paths = {}
        for name, cfg in (("plain", LLAMA), ("gptq", LLAMA_GPTQ),
                          ("fp8", dict(LLAMA, quantization_config={"quant_method": "fp8"}))):
            paths[name] = os.path.join(self.dir, name + ".json")
            with open(paths[name], "w") as f:
                json.dump(cfg, f)
        args = ("--gpu", "h100", "--dtype", "fp16", "--generate", "128:8")
        plain, gptq, fp8 = (run_json("--config", paths[k], *args) for k in ("plain", "gptq", "fp8"))
        self.assertLess(gptq["generation"]["weight_bytes"], 0.75 * plain["generation"]["weight_bytes"])  # embedding, head fp16
        self.assertLess(gptq["generation"]["tpot_ms"], plain["generation"]["tpot_ms"])
        notes = [w for w in fp8["warnings"] if "quant_method fp8" in w]
        self.assertEqual(len(notes), 1, fp8["warnings"])
        self.assertEqual(fp8["generation"]["weight_bytes"], plain["generation"]["weight_bytes"])
        self.assertFalse([w for w in gptq["warnings"] if "quant_method" in w])

    def test_a_model_folder_is_its_config(self):
        folder = os.path.join(self.dir, "Llama-small")
        os.makedirs(folder)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(LLAMA, f)
        args = ("--batch", "1", "--seq", "64", "--gpu", "h100")
        via_folder = run_json("--config", folder, *args)
        via_file = run_json("--config", os.path.join(folder, "config.json"), *args)
        self.assertEqual(via_folder["e2e_latency_ms"], via_file["e2e_latency_ms"])
        code, so, se = run("compare", folder, os.path.join(folder, "config.json"), *args)
        self.assertEqual(code, 0, se)
        self.assertIn("Llama-small", so)
        code, so, se = run("--config", self.dir, *args)
        self.assertEqual(code, 2)
        self.assertIn("without a config.json", se)


if __name__ == "__main__":
    unittest.main()
