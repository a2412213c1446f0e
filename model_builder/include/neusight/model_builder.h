// model_builder.h - build ONNX graphs of transformer models from Hugging Face configs.
//
// Takes: a Hugging Face style config.json (GPT-2 / GPT-3-in-GPT-2-form, BERT, OPT, T5 and mT5,
// Switch Transformer, Llama-style decoders (Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma 1-3, Phi,
// GPT-NeoX, GPT-J, Falcon, StarCoder (GPTBigCode), StarCoder2, BLOOM, MPT, Granite, Cohere 1-2,
// InternLM2, OLMo 2, Nemotron), mixtures of experts (Mixtral, Qwen2-MoE, Qwen3-MoE, gpt-oss,
// DeepSeek-V3), image encoders (ViT, DeiT, DINOv2, CLIP, SigLIP) and vision-language models
// with their towers (LLaVA, LLaVA-NeXT, PaliGemma, Gemma 3, Qwen2-VL, Qwen2.5-VL, Qwen3-VL,
// Mistral 3, Llama 4)).
// Gives: a LoadedModel whose graph mirrors what PyTorch runs for that model, with symbolic
// `batch` and `sequence` input dims and weights as external-data stubs that are never
// materialised (a 175B model builds instantly).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "neusight/onnx_frontend.h"

namespace neusight {

struct ModelConfig {
  std::string model_type;  // "gpt2", "bert", "opt", "switch_transformers", "llama", "mistral", "mixtral", ...
  int64_t layers = 0;        // decoder layers (encoder layers for BERT / Switch)
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;      // grouped-query attention (0: = heads)
  int64_t head_dim = 0;      // per-head size (0: hidden / heads; Switch/T5: d_kv)
  int64_t ffn = 0;           // intermediate size
  int64_t vocab = 0;
  int64_t max_positions = 0;
  std::string activation;    // "gelu_new", "gelu", "relu", "silu"
  double layer_norm_eps = 1e-5;
  float dropout = 0.1f;      // hidden dropout (active in training only)
  float attn_dropout = 0.1f; // attention-probability dropout
  // BERT: token-type vocabulary and the head on the encoder, from `architectures`:
  // "classification" (pooler + classifier of num_labels, BertForSequenceClassification),
  // "pretraining" (pooler, masked-LM head and next-sentence head, BertForPreTraining) or
  // "lm" (masked-LM head, BertLMHeadModel / BertForMaskedLM). T5, mT5 and Switch: "encoder"
  // for their encoder models (T5EncoderModel: the encoder alone, its last hidden state).
  int64_t type_vocab = 0;
  int64_t num_labels = 2;
  std::string head;
  // ModernBERT's heads: the prediction head's dense bias (classifier_bias) and activation
  // (classifier_activation), the MLM decoder's bias (decoder_bias), the classifier's pooling
  // (classifier_pooling "mean": over the tokens; "cls": the first token), and the embedding
  // and classifier dropouts.
  struct EncoderHead {
    bool dense_bias = true, decoder_bias = true, mean_pooling = false;
    std::string activation = "gelu";
    float embedding_dropout = 0, classifier_dropout = 0;
  } encoder_head;
  // DeBERTa-v2 / v3's disentangled attention: the relative embeddings' rows (2 x span: span =
  // position_buckets, else max_relative_positions), log buckets of relative positions beyond
  // half the buckets (position_buckets > 0; max_relative_positions their far end), which of the
  // content-to-position and position-to-content terms it adds (pos_att_type), the relative
  // embeddings' LayerNorm (norm_rel_ebd), absolute positions added to the input as well
  // (position_biased_input). DeBERTa (v1, model_type deberta): q, k and v from one in_proj GEMM
  // without bias whose per-head thirds are the heads' query, key and value, q_bias and v_bias
  // added; the relative embeddings' rows within min(sequence, max_relative) of the middle
  // through their own pos_proj (c2p) and pos_q_proj (p2c) projections; DebertaLayerNorm (each
  // step its own kernel); relative terms only with relative_attention.
  struct Disentangled {
    int64_t span = 0, buckets = 0, max_relative = 0;
    bool c2p = false, p2c = false, norm_rel = false, position_input = false;
    bool v1 = false, relative = true;
  } deberta;
  // OPT: layer norm before (true) or after each block; word embedding size when it differs
  // from the hidden size (project_in / project_out; 0 = hidden).
  bool pre_norm = true;
  int64_t embed_dim = 0;
  // Llama: rotary base, attention projections with bias (Qwen2).
  double rope_theta = 10000.0;
  bool qkv_bias = false;
  // The LM head shares the token embedding's weight (tie_word_embeddings; Gemma's default):
  // the graph still reads it as its own [hidden, vocab] matrix (lm_head.weight), as
  // nn.Linear does, but the model holds it once (generation's memory counts it once).
  bool tie_embeddings = false;
  // Qwen3: an RMSNorm over each head of the queries and keys before the rotary embedding.
  bool qk_norm = false;
  // OLMo 2: an RMSNorm over the whole query and key projections (before the heads split), and
  // the layer's norms after the attention and the MLP instead of before them (post_norm).
  bool qk_norm_full = false;
  bool post_norm = false;
  // Gemma 3: RMSNorms after the attention and after the MLP as well as before each
  // (post_attention_layernorm on the attention's output, pre/post_feedforward_layernorm around
  // the MLP), and the embedding scaled by sqrt(hidden).
  bool sandwich_norm = false;
  bool scale_embedding = false;
  // Phi (phi-1/1.5/2) and GPT-NeoX (Pythia): LayerNorms with bias instead of RMSNorms, a
  // dense MLP (fc1, activation, fc2, biased) instead of SwiGLU, rotary on the first
  // rotary_fraction of each head (partial_rotary_factor, rotary_pct), and the attention and the
  // MLP side by side, adding to the residual together (parallel_block): 1 reading one normed
  // input (Phi), 2 each its own norm of the input (GPT-NeoX's use_parallel_residual); 0 in
  // sequence. GPT-NeoX projects Q, K and V in one GEMM whose output interleaves them per head
  // (fused_qkv). Phi's LM head has a bias (head_bias). The dense MLP's two GEMMs carry biases
  // unless mlp_bias says not (Falcon's bias: false). GPT-J is Phi's block, Falcon either
  // (parallel_attn; its new decoder architecture GPT-NeoX's), StarCoder2 a sequential one.
  bool layer_norm = false;
  bool dense_mlp = false;
  bool mlp_bias = true;
  // The gated MLP's gate, up and down projections biased (Llama's mlp_bias, ERNIE 4.5's use_bias).
  bool gated_mlp_bias = false;
  // ALiBi instead of rotary (BLOOM, MPT, Falcon-RW): each head's scores plus its slope times
  // the key's position, a [batch, heads, 1, keys] bias built once per forward from the
  // attention mask's cumulative sum, as HF builds it. BLOOM normalises the embedding
  // (embedding_norm); MPT's LayerNorms have no bias (norm_bias).
  bool alibi = false;
  // Learned absolute positions added to the token embeddings (GPT-2, BERT, OPT, CLIP's and
  // SigLIP's text; in the Llama builder GPTBigCode's wpe, no rotary): a table of max_positions
  // rows no sequence may outgrow (PyTorch's lookup fails beyond it).
  bool learned_positions = false;
  // Cohere 2 and Llama 4: rotary on the sliding-window (Llama 4: chunked) layers only; the
  // global layers use no positions. Llama 4 normalises each query and key head of its rotary
  // layers only (qk_norm_rotary_only) by its root mean square, without a weight
  // (qk_norm_unweighted), and scales the queries of its global layers by
  // log(floor((position + 1) / attn_floor_scale) + 1) * attn_scale + 1 (attn_temperature_tuning).
  bool rotary_sliding_only = false;
  // Hybrid and state-space decoders (Mamba-2, Nemotron-H): one block per layer, its kind the
  // layer's character of block_pattern: 'M' a Mamba-2 mixer, '*' attention (no positions), '-'
  // an MLP of ffn (up, activation, down; not gated), each after an RMSNorm and added to the
  // residual. Empty: the usual attention + MLP layers. A Mamba-2 mixer: in_proj to z, x, B, C
  // and dt; a causal depthwise convolution of conv_kernel over x, B and C, SiLU; the chunked
  // state-space scan (ai.neusight StateSpaceScan, chunks of ssm_chunk) over mamba_heads heads of
  // mamba_head_dim with a state of ssm_state per head, B and C shared by ssm_groups groups of
  // heads; RMSNorm of y x silu(z) per group; out_proj.
  std::string block_pattern;
  // Qwen3-Next: the layers whose token mixer is a gated DeltaNet (delta_layers; the others
  // attend): in_proj_qkvz and in_proj_ba, the causal convolution of conv_kernel over q, k and v
  // with its SiLU, the gated delta rule (ai.neusight GatedDeltaRule) over delta_value_heads heads
  // (the delta_key_heads query and key heads repeated to them) of delta_key_dim / delta_value_dim,
  // the gated RMSNorm with z, out_proj. Its attention layers gate their output
  // (attn_output_gate: q_proj also gives a gate per head; output x sigmoid(gate)).
  std::vector<bool> delta_layers;
  // Granite 4.0-H: the usual two-block layers whose token mixer is a Mamba-2 mixer (mamba_layers;
  // the others attend), and attention without positions (no_positions: position_embedding_type
  // "nope").
  std::vector<bool> mamba_layers;
  bool no_positions = false;
  int64_t delta_key_heads = 0, delta_value_heads = 0, delta_key_dim = 0, delta_value_dim = 0;
  bool attn_output_gate = false;
  int64_t mamba_heads = 0, mamba_head_dim = 0, ssm_state = 0, ssm_groups = 1, conv_kernel = 4, ssm_chunk = 256;
  bool mamba_conv_bias = true, mamba_proj_bias = false;
  bool qk_norm_rotary_only = false;
  bool qk_norm_unweighted = false;
  bool attn_temperature_tuning = false;
  double attn_floor_scale = 8192;
  double attn_scale = 0.1;
  bool embedding_norm = false;
  bool norm_bias = true;
  // Constant scales PyTorch applies as kernels of their own (0: none): the embedding times
  // embedding_multiplier (Granite), each residual branch times residual_multiplier before it
  // is added (Granite), the logits times logits_multiplier (Granite's 1 / logits_scaling,
  // Cohere's logit_scale).
  double embedding_multiplier = 0;
  double residual_multiplier = 0;
  double logits_multiplier = 0;
  int parallel_block = 0;
  bool fused_qkv = false;
  // Phi-3 (and Phi-4): one qkv_proj GEMM whose output holds all query heads, then the key and
  // the value heads ([q | k | v]), and one gate_up_proj GEMM whose output is [gate | up].
  bool fused_qkv_blocks = false;
  bool fused_gate_up = false;
  bool head_bias = false;
  double rotary_fraction = 1.0;
  // Gemma 2: the attention scores and the final logits soft-capped, cap * tanh(x / cap)
  // (attn_logit_softcapping, final_logit_softcapping; 0: none).
  double attn_softcap = 0;
  double final_softcap = 0;
  // Mixture of experts: experts per MoE layer. Switch: every `sparse_step`-th layer sparse,
  // each expert takes at most `expert_capacity` tokens per sequence (top-1 routing). Mixtral,
  // Qwen3-MoE: every `sparse_step`-th decoder layer's MLP (1: all) but `dense_layers`, each
  // token routed to `experts_per_token` of them.
  int64_t experts = 0;
  int64_t experts_per_token = 1;  // top-k routing (Mixtral: num_experts_per_tok)
  int64_t expert_ffn = 0;         // an expert's intermediate size (0: ffn; Qwen3-MoE: moe_intermediate_size)
  bool normalize_routing = true;  // the top-k probabilities renormalised to sum to 1 (norm_topk_prob)
  std::vector<int64_t> dense_layers;  // decoder layers with a dense MLP instead (mlp_only_layers)
  // Qwen2-MoE: a shared SwiGLU expert of this intermediate size beside the routed ones, its
  // output scaled by a sigmoid gate (0: none).
  int64_t shared_expert_ffn = 0;
  bool shared_expert_gate = true;  // Qwen2-MoE scales it by sigmoid(gate(x)); DeepSeek adds it as is
  // DeepSeek-V3 multi-head latent attention (kv_lora_rank > 0): queries through a rank-
  // q_lora_rank bottleneck (0: one projection), keys and values expanded per head from a
  // kv_lora_rank latent that, with the qk_rope_dim rotary key shared by the heads, is all the
  // KV cache holds; query/key heads of qk_nope_dim + qk_rope_dim, value heads of v_head_dim.
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_dim = 0, qk_rope_dim = 0, v_head_dim = 0;
  // DeepSeek-V3's multi-token-prediction modules (num_nextn_predict_layers): not part of the
  // model's forward pass; speculative decoding's draft (mtp_decoder, neusight.h).
  int64_t mtp_layers = 0;
  // Build the graph of one such module instead of the model (mtp_decoder): the token's
  // embedding and the target's last hidden state (graph input `hidden_states`), each
  // RMS-normalised (enorm, hnorm), concatenated and projected back to the hidden size
  // (eh_proj), then the module's decoder layer, norm and the shared LM head.
  bool mtp_module = false;
  // gpt-oss: biases on the attention output projection, the router and every expert layer.
  bool o_bias = false;
  bool expert_bias = false;
  // Experts stored quantized (quantization_config): bits per weight and the block of weights
  // sharing one 1-byte scale (MXFP4: 4 bits, blocks of 32); 0 bits: the model's dtype.
  int64_t expert_weight_bits = 0;
  int64_t expert_block = 0;
  // Sliding-window attention: the layers whose queries see only the `sliding_window` most
  // recent keys (one flag per decoder layer; empty: none). From layer_types, Mistral's
  // sliding_window, or Qwen2's use_sliding_window with max_window_layers.
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;
  int64_t sparse_step = 0;
  int64_t expert_capacity = 0;
  // Linear weights stored quantized (the quantization_config of GPTQ and AWQ checkpoints):
  // bits per weight (2-8; 0: the model's dtype) in groups of weight_group along the input dim
  // (0: one scale per output row, group_size -1), each group with a scale and, asymmetric,
  // a zero point. The projections inside the layers are onnxruntime's MatMulNBits (a
  // mixture's experts its QMoE), as serving engines run such checkpoints; the embedding, the
  // LM head and the modules the config leaves unconverted (modules_to_not_convert, by name)
  // keep the model's dtype. quant_method names the method, also one the tool does not build
  // (config_quantization_note).
  int64_t weight_bits = 0;
  int64_t weight_group = 0;
  bool weight_zero_points = false;
  std::vector<std::string> unquantized;
  std::string quant_method;
  // LLaVA's and PaliGemma's vision tower and projector (layers 0: not built): a CLIP vision
  // transformer of `layers` pre-norm layers (hidden, heads, ffn, activation) over an image of image_size
  // pixels cut into patch_size patches with a class token, its hidden_states[feature_layer]
  // (0: the embeddings, i: layer i - 1's output; the config's vision_feature_layer, -2, counted
  // from the end) without the class token (strategy "default"; with it: "full"), projected to
  // the language model's hidden size by linear_1, the
  // projector's activation and linear_2. Each sequence holds one image's tokens() among its
  // tokens (they replace the image placeholder's embeddings). CLIP's and SigLIP's own image
  // tower (language_model_of empty; model_type clip, siglip and their vision models) is one too.
  struct VisionTower {
    // The tower's family: CLIP's (LLaVA, LLaVA-NeXT, CLIP itself), SigLIP's (PaliGemma, Gemma 3,
    // SigLIP itself), Qwen2-VL's / Qwen2.5-VL's / Qwen3-VL's, Mistral 3's Pixtral, Llama 4's.
    enum class Kind { clip, siglip, qwen, pixtral, llama4 };
    Kind kind = Kind::clip;
    bool siglip() const { return kind == Kind::siglip; }
    bool qwen() const { return kind == Kind::qwen; }
    bool pixtral() const { return kind == Kind::pixtral; }
    bool llama4() const { return kind == Kind::llama4; }
    int64_t layers = 0, hidden = 0, heads = 0, ffn = 0, image_size = 0, patch_size = 0, channels = 3;
    std::string activation = "quick_gelu", projector_activation = "gelu";
    bool projector_bias = true;  // the projector's linear_1 and linear_2 (Mistral 3: multimodal_projector_bias)
    double layer_norm_eps = 1e-5;
    int64_t feature_layer = 0;
    bool keep_class_token = false;
    // PaliGemma's SigLIP tower (siglip()): no class token or pre-norm, the patch convolution
    // with a bias, post_layernorm over every token (the last hidden state, the features), one
    // linear projector, the features divided by sqrt(the language model's hidden size).
    // LLaVA-NeXT's any-resolution tiling (image_grid_pinpoints): the image resized to a grid of
    // grid_rows x grid_cols crops of image_size, each through the tower beside the whole image
    // resized to one crop; the crops' features laid out as one (rows x side) x (cols x side)
    // feature map with a learned image_newline after each of its rows, after the whole image's.
    // 0: one crop (LLaVA-1.5). pinpoints: the [height, width] resolutions the processor
    // chooses among (image_grid_pinpoints). feature_rows x feature_cols: the grid's feature map
    // after unpad_image crops the padding of an image of another aspect (0: the whole map).
    int64_t grid_rows = 0, grid_cols = 0;
    std::vector<std::pair<int64_t, int64_t>> pinpoints;
    int64_t feature_rows = 0, feature_cols = 0;
    // The image as set_image_size was given it, before the processor (0: the builder's default).
    int64_t given_height = 0, given_width = 0;
    // Gemma 3's projector (SigLIP tower): the patch features average-pooled to pooled_tokens
    // (mm_tokens_per_image: a square grid), RMS-normalised and projected by one matrix (0: none).
    int64_t pooled_tokens = 0;
    // Qwen2-VL's and Qwen2.5-VL's tower (qwen()): an image of image_size x image_width
    // pixels (multiples of patch_size x merge_size, as the processor resizes it; set_image_size)
    // cut into patch_size patches of temporal_patch frames (a still image repeated), every
    // layer attending with 2D rotary positions, then merge_size x merge_size neighbouring
    // patches concatenated and projected (PatchMerger) to out_hidden, the language model's
    // width. Qwen2-VL: LayerNorms and an MLP of fc1, the activation and fc2. Qwen2.5-VL
    // (window_size > 0): RMSNorms, a gated MLP (gate_proj, up_proj, down_proj), and attention
    // within windows of window_size pixels but in full_attention_layers.
    int64_t image_width = 0, merge_size = 0, temporal_patch = 0, out_hidden = 0, window_size = 0;
    std::vector<int64_t> full_attention_layers;
    // The processor's pixel bounds (smart_resize's min_pixels, max_pixels).
    int64_t min_pixels = 0, max_pixels = 0;
    // Qwen3-VL (position_grid > 0): the patch convolution with a bias, learned positions on a
    // position_grid x position_grid table bilinearly interpolated to the image's patch grid and
    // added, gelu_pytorch_tanh MLPs named linear_fc1 / linear_fc2, and DeepStack: after each of
    // deepstack_layers a merger of its own (norm after the 2 x 2 concatenation) whose features
    // are added to the image tokens' states after the language model's first layers, in order.
    int64_t position_grid = 0;
    std::vector<int64_t> deepstack_layers;
    // Mistral 3's Pixtral tower (pixtral()): an image of image_size x image_width pixels (each side
    // a multiple of patch_size, the longer at most longest_edge pixels, as the processor resizes
    // it), patches through RMSNorm pre-norm layers with 2D rotary positions and gated
    // MLPs; the projector's RMSNorm, merge_size x merge_size patches unfolded and merged by one
    // matrix, then linear_1, the activation and linear_2. Its tokens: (rows / merge) x (columns /
    // merge).
    int64_t longest_edge = 0;
    // Llama 4's tower (llama4()): each image resized onto a canvas of tile_rows x tile_cols tiles of
    // image_size (the processor's get_best_fit among the canvases of at most max_tiles tiles), plus
    // one global tile of the whole image when there are several; each tile's patches (and a class
    // token, last) through LayerNorm layers with 2D rotary positions, the class token dropped,
    // pixel-shuffled by shuffle (patches merged shuffle x shuffle into wider tokens), the adapter
    // MLP (fc1, GELU, fc2, GELU) to adapter_dim, then the projector. Tokens per tile:
    // (image_size / patch_size / shuffle)^2.
    int64_t tile_rows = 1, tile_cols = 1, max_tiles = 16, shuffle = 2, adapter_dim = 0;
    int64_t tiles() const { return tile_rows * tile_cols + (tile_rows * tile_cols > 1 ? 1 : 0); }
    // Images per sequence (--images), each through the tower: their tokens one after another
    // before the text's. tokens() counts one image's, sequence_tokens() all of them.
    int64_t images = 1;
    int64_t crops() const { return 1 + grid_rows * grid_cols; }
    int64_t tokens() const {
      if (merge_size > 0) return (image_size / (patch_size * merge_size)) * (image_width / (patch_size * merge_size));
      if (llama4()) {
        const int64_t side = image_size / patch_size / shuffle;
        return tiles() * side * side;
      }
      const int64_t side = patch_size > 0 ? image_size / patch_size : 0;
      const int64_t one = pooled_tokens > 0 ? pooled_tokens : side * side + (keep_class_token ? 1 : 0);
      const int64_t rows = feature_rows > 0 ? feature_rows : grid_rows * side;
      const int64_t cols = feature_cols > 0 ? feature_cols : grid_cols * side;
      return one + (grid_rows > 0 ? rows * (cols + 1) : 0);
    }
    int64_t sequence_tokens() const { return images * tokens(); }
  } vision;
  // Vision Transformer (ViT): a [batch, num_channels, image_size, image_size] image cut into
  // patch_size patches (a strided convolution), a class token before them; 0: a token model.
  int64_t image_size = 0, patch_size = 0, num_channels = 3;
  // DeiT and DINOv2 on the ViT builder (model_type deit, dinov2). DeiT: a distillation token
  // after the class token (its positions cover patches + 2 tokens). DINOv2: LayerScale (the
  // attention's and the MLP's outputs times a learned per-channel lambda1 before each residual
  // add), SwiGLU MLPs where use_swiglu_ffn (weights_in to twice ffn, silu(x1) * x2,
  // weights_out), a mask token (a parameter a forward pass without a mask never reads), and a
  // position table of position_grid x position_grid patches (the config's image_size), which
  // an image of another grid (image_size x image_width, set_image_size) reads bicubically
  // interpolated to its own. image_width 0: a square image.
  struct VitVariant {
    bool distillation_token = false, layer_scale = false, swiglu = false, mask_token = false;
    int64_t position_grid = 0, image_width = 0;
  } vit;
  // CLIP and SigLIP (model_type clip, siglip: the text tower in the fields above, the image
  // tower in `vision`; clip_vision_model, siglip_vision_model: `vision` alone, its sizes copied
  // above; clip_text_model, siglip_text_model: the text tower alone, pooled, CLIP's "projection"
  // head projected). head: "contrastive" (both towers, each pooled and projected to projection_dim,
  // L2-normalised, then image-text logits), "pooler" (CLIPVisionModel: the class token's
  // post_layernorm), "projection" (CLIPVisionModelWithProjection: that, projected), "map"
  // (SiglipVisionModel: attention pooling with a learned probe) or "none" (SigLIP without its
  // head: the last hidden state).
  int64_t projection_dim = 0;
  int64_t decoder_layers = 0;  // encoder-decoder models (Switch, T5, Whisper, BART, Marian)
  // BART and Marian: the row of the position table that position 0 reads (BART's learned table
  // starts at row 2), a bias added to the logits (final_logits_bias, a buffer), and the
  // decoder's own token table where the encoder's is not shared (Marian's
  // share_encoder_decoder_embeddings false; 0: shared).
  int64_t position_offset = 0;
  bool final_logits_bias = false;
  int64_t decoder_vocab = 0;
  // Whisper: the log-mel bins of its audio input and the encoder's positions
  // (max_source_positions: 1500 for 30 s, the input holding twice as many frames).
  int64_t mel_bins = 0, source_positions = 0;
  // T5 v1.1, mT5, Flan-T5: the feed-forward's activation gates a second projection
  // (feed_forward_proj "gated-gelu": wi_0, wi_1; HF's is_gated_act).
  bool gated_act = false;
  int64_t rel_buckets = 32;    // T5 relative-position buckets
  std::string source;        // the config file
  // A multimodal config's model_type when this is its language model (text_config; Qwen2-VL's
  // top-level fields): the vision tower and projector are not built (config_multimodal_note).
  std::string language_model_of;
  // Whether each sequence holds an image's tokens(): a multimodal config's language model whose
  // vision tower is built (LLaVA, LLaVA-NeXT, PaliGemma), not CLIP's or SigLIP's own tower.
  bool image_in_sequence() const { return !language_model_of.empty() && vision.layers > 0; }
  // The checkpoint's stored precision (`torch_dtype`, or `dtype` as transformers 4.56 and later
  // save it, e.g. "bfloat16"; empty when absent). The graph is built in FP32 whatever it says:
  // PyTorch's from_pretrained loads FP32 unless asked (`torch_dtype=` at load time), and the
  // measured runs of neusight-data are FP32 with configs that say bfloat16 (Switch). See
  // config_dtype_note; a generation is served in config_serving_dtype.
  std::string torch_dtype;
};

// The token mixer of decoder layer `l`: a Mamba-2 mixer (Mamba-2 and Nemotron-H's 'M' blocks,
// Granite 4.0-H's mamba_layers), a gated DeltaNet (Qwen3-Next's delta_layers), or attention
// (every other layer but a hybrid's MLP-only blocks). The recurrent mixers keep per-sequence
// states where attention keeps keys and values.
bool mamba_layer(const ModelConfig& c, int64_t l);
bool delta_layer(const ModelConfig& c, int64_t l);
bool attention_layer(const ModelConfig& c, int64_t l);

// The image of `height` x `width` pixels a vision-language config's tower reads, as its
// processor prepares it. Qwen2-VL and Qwen2.5-VL: resized (Qwen2VLImageProcessor's
// smart_resize: each side rounded to a multiple of patch_size x merge_size, the area then
// scaled into the checkpoints' preprocessor_config.json bounds of 3,136 to 12,845,056 pixels,
// aspect kept). LLaVA-NeXT: the pinpoint select_best_resolution picks (the most of the image's
// pixels kept, then the least padding) sets the grid of crops, and unpad_image the part of its
// feature map the image covers. DINOv2: the image as given (its processor crops 224 x 224;
// each side a multiple of patch_size), its positions interpolated to that grid. InputError for
// a config whose tower takes one fixed image (ViT, DeiT, CLIP, SigLIP, LLaVA-1.5, PaliGemma),
// or none.
void set_image_size(ModelConfig& c, int64_t height, int64_t width);

// `images` images in each sequence of a vision-language config whose tower is built (LLaVA,
// LLaVA-NeXT, PaliGemma, Gemma 3, Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Mistral 3): each through the
// tower, their tokens first in the sequence. InputError for other configs or outside 1-256.
void set_images(ModelConfig& c, int64_t images);

// Reads a config.json, or the config.json of a model's folder (a Hugging Face snapshot; the
// model is then named after the folder). Throws InputError naming the file and the missing
// field.
ModelConfig read_hf_config(const std::string& path);
// The same from the config's JSON text; `what` names it in errors.
ModelConfig parse_hf_config(const std::string& text, const std::string& what);

struct BuildOptions {
  // One decoder step with a KV cache, as Hugging Face generate() runs it after the prefill
  // (optimum's export naming): per layer inputs past_key_values.N.key / .value [batch,
  // kv_heads, past_sequence, head_dim], concatenated with the step's keys and values into
  // outputs present.N.key / .value; the step's `sequence` tokens attend to past + sequence
  // keys. Decoders only (supports_kv_cache).
  bool kv_cache = false;
  // Logits of the last position only ([batch, 1, vocab]), as generate() computes them in the
  // prefill (HF logits_to_keep=1; serving engines alike). Decoders only.
  bool last_logits = false;
};

// Builds the model graph. Throws InputError for unsupported model types (and for a KV
// cache on a family without one).
LoadedModel build_model(const ModelConfig& config, const BuildOptions& options = {});

// True when build_model can build the family with a KV cache (causal decoders).
bool supports_kv_cache(const ModelConfig& config);

// A one-line note for a prediction of a config whose checkpoint is stored in half precision
// (`torch_dtype` float16 / bfloat16) made without --dtype: it runs in FP32, as PyTorch loads
// it by default, and `--dtype` names the flag for the stored precision. Empty otherwise.
std::string config_dtype_note(const ModelConfig& config);
// The dtype a serving engine loads the checkpoint in by default (vLLM's --dtype auto): its
// `torch_dtype` bfloat16 or float16, FP16 for float32 or none (older configs, GPT-2's among
// them, name none; their checkpoints are FP32).
DType config_serving_dtype(const ModelConfig& config);
// The note of a generation (serving) of a config whose checkpoint is not stored in 16 bits,
// made without --dtype: served in FP16 as above, `--dtype fp32` to keep FP32. Empty otherwise.
std::string config_serving_dtype_note(const ModelConfig& config);
// A warning when tensor parallelism over `tp` GPUs cannot split the model as Megatron and
// vLLM require: tp must divide the attention heads and the MLP's (and an expert's)
// intermediate size, and the KV heads or be a multiple of them (vLLM replicates KV heads over
// the surplus GPUs); such shards are predicted padded. Empty when it can (or tp <= 1).
std::string config_parallel_note(const ModelConfig& config, int tp);
// A note for a config whose quantization_config names a method the graph does not build
// (bitsandbytes, FP8, compressed-tensors, ...): its weights are priced in the model's dtype
// (or --dtype). Empty for GPTQ, AWQ, gpt-oss's MXFP4 and unquantized configs.
std::string config_quantization_note(const ModelConfig& config);
// A note for a multimodal config (LLaVA, Mistral 3, Qwen2-VL, ...) whose language model alone
// is built. Empty otherwise.
std::string config_multimodal_note(const ModelConfig& config);

}  // namespace neusight
