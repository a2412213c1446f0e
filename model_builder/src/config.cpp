// config.cpp - Hugging Face config.json -> ModelConfig, and the table of model families.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "common.h"
#include "families.h"
#include "neusight/model_builder.h"

namespace neusight {
using nlohmann::json;

namespace {

constexpr int64_t kMaxConfigInt = (int64_t(1) << 31) - 1;
// More layers than any model built (100x GPT-3's 96), or more expert MLPs over all layers
// than 15x Switch-C's 61,440 (DeepSeek-V3: 15,616), is a typo; the graph would take minutes
// and gigabytes to build.
constexpr int64_t kMaxLayers = 10000;
constexpr int64_t kMaxLayerExperts = 1000000;
constexpr int64_t kMaxExpertCapacity = int64_t(1) << 20;
// The image a Qwen2-VL, Qwen2.5-VL, Qwen3-VL or Mistral 3 config (processors that take any size)
// is predicted on without --image-size: 448 x 448 pixels (Qwen2-VL: 256 tokens after the 2 x 2
// merge). An assumption of this tool, not the models'.
constexpr int64_t kDefaultImage = 448;

struct Reader {
  const json& j;
  const std::string& path;

  int64_t i(std::initializer_list<const char*> keys, bool required, int64_t fallback = 0) const {
    for (const char* k : keys) {
      auto it = j.find(k);
      if (it == j.end() || it->is_null()) continue;
      if (!it->is_number_integer()) throw InputError(path + ": field '" + k + "' must be an integer");
      const int64_t v = it->get<int64_t>();
      if (v < 0) throw InputError(path + ": field '" + k + "' must be non-negative");
      // Sizes are products of these (4 x hidden, hidden x vocab, ...): int32, as in the
      // frameworks that write configs, keeps every product within int64.
      if (v > kMaxConfigInt) throw InputError(path + ": field '" + k + "' is beyond 2^31 - 1");
      return v;
    }
    if (required) throw InputError(path + ": missing field '" + std::string(*keys.begin()) + "'");
    return fallback;
  }
  double f(std::initializer_list<const char*> keys, double fallback) const {
    for (const char* k : keys) {
      auto it = j.find(k);
      if (it == j.end() || it->is_null()) continue;
      if (!it->is_number()) throw InputError(path + ": field '" + k + "' must be a number");
      return it->get<double>();
    }
    return fallback;
  }
  std::string s(std::initializer_list<const char*> keys, const std::string& fallback) const {
    for (const char* k : keys) {
      auto it = j.find(k);
      if (it != j.end() && it->is_string()) return it->get<std::string>();
    }
    return fallback;
  }
  bool b(const char* key, bool fallback) const {
    auto it = j.find(key);
    return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
  }
  // The model class the config was saved from (architectures[0]; empty when absent).
  std::string architecture() const {
    auto it = j.find("architectures");
    return it != j.end() && it->is_array() && !it->empty() && it->front().is_string() ? it->front().get<std::string>()
                                                                                     : std::string();
  }
};

void read_gpt2(const Reader& r, ModelConfig& c) {
  c.layers = r.i({"n_layer", "num_hidden_layers"}, true);
  c.hidden = r.i({"n_embd", "hidden_size"}, true);
  c.heads = r.i({"n_head", "num_attention_heads"}, true);
  c.ffn = r.i({"n_inner"}, false, 0);
  if (c.ffn == 0) c.ffn = 4 * c.hidden;
  c.vocab = r.i({"vocab_size"}, true);
  c.max_positions = r.i({"n_positions", "n_ctx"}, false, 1024);
  c.learned_positions = true;
  c.activation = r.s({"activation_function"}, "gelu_new");
  c.layer_norm_eps = r.f({"layer_norm_epsilon"}, 1e-5);
  c.dropout = static_cast<float>(r.f({"resid_pdrop"}, 0.1));
  c.attn_dropout = static_cast<float>(r.f({"attn_pdrop"}, 0.1));
  c.tie_embeddings = r.b("tie_word_embeddings", true);
}

// RoBERTa's positions (XLM-RoBERTa's, CamemBERT's, MPNet's): counted from pad_token_id + 1, so
// the table's max_position_embeddings rows hold that many fewer tokens.
void read_padding_positions(const Reader& r, ModelConfig& c) {
  c.position_offset = r.i({"pad_token_id"}, false, 1) + 1;
  if (c.max_positions <= c.position_offset)
    throw InputError(r.path + ": max_position_embeddings must exceed pad_token_id + 1");
  c.max_positions -= c.position_offset;
}

void read_bert(const Reader& r, ModelConfig& c) {
  c.layers = r.i({"num_hidden_layers"}, true);
  c.hidden = r.i({"hidden_size"}, true);
  c.heads = r.i({"num_attention_heads"}, true);
  c.ffn = r.i({"intermediate_size"}, true);
  c.vocab = r.i({"vocab_size"}, true);
  c.max_positions = r.i({"max_position_embeddings"}, false, 512);
  c.learned_positions = true;
  c.type_vocab = r.i({"type_vocab_size"}, false, 2);
  c.activation = r.s({"hidden_act"}, "gelu");
  c.layer_norm_eps = r.f({"layer_norm_eps"}, 1e-12);
  c.dropout = static_cast<float>(r.f({"hidden_dropout_prob"}, 0.1));
  c.attn_dropout = static_cast<float>(r.f({"attention_probs_dropout_prob"}, 0.1));
  c.num_labels = r.i({"num_labels"}, false, 2);
  const std::string arch = r.architecture();
  auto ends = [&](const char* tail) {
    const std::string t = tail;
    return arch.size() >= t.size() && arch.compare(arch.size() - t.size(), t.size(), t) == 0;
  };
  // BertModel, RobertaModel, CamembertModel, ...: the encoder and its pooler (the embedding
  // models' form); a task's head otherwise, a sequence classifier without an architecture.
  c.head = ends("ForPreTraining")                          ? "pretraining"
           : ends("LMHeadModel") || ends("ForMaskedLM")    ? "lm"
           : ends("Model")                                 ? "base"
                                                           : "classification";
  if (c.model_type == "roberta" || c.model_type == "xlm-roberta" || c.model_type == "camembert") {
    read_padding_positions(r, c);
    c.type_vocab = r.i({"type_vocab_size"}, false, 1);
    c.layer_norm_eps = r.f({"layer_norm_eps"}, 1e-5);
  }
}

// ElectraConfig: BertConfig's fields and embedding_size; the discriminator (ElectraForPreTraining)
// unless the architecture names another head.
void read_electra(const Reader& r, ModelConfig& c) {
  read_bert(r, c);
  c.embed_dim = r.i({"embedding_size"}, false, c.hidden);
  const std::string arch = r.architecture();
  c.head = arch == "ElectraModel"                      ? "base"
           : arch == "ElectraForMaskedLM"              ? "lm"
           : arch == "ElectraForSequenceClassification" ? "classification"
                                                        : "pretraining";
}

// AlbertConfig: BertConfig's fields, embedding_size, and one group of one shared layer (every
// released checkpoint's num_hidden_groups and inner_group_num).
void read_albert(const Reader& r, ModelConfig& c) {
  read_bert(r, c);
  c.embed_dim = r.i({"embedding_size"}, false, 128);
  c.activation = r.s({"hidden_act"}, "gelu_new");
  if (r.i({"num_hidden_groups"}, false, 1) != 1 || r.i({"inner_group_num"}, false, 1) != 1)
    throw InputError(r.path + ": ALBERT with more than one layer group or inner layer is not built");
}

// MPNetConfig: BertConfig's fields without token types, positions from pad_token_id + 1 as
// RoBERTa's, relative_attention_num_buckets for the position bias.
void read_mpnet(const Reader& r, ModelConfig& c) {
  read_bert(r, c);
  c.type_vocab = 0;
  c.layer_norm_eps = r.f({"layer_norm_eps"}, 1e-5);
  c.rel_buckets = r.i({"relative_attention_num_buckets"}, false, 32);
  if (c.rel_buckets < 2) throw InputError(r.path + ": relative_attention_num_buckets must be at least 2");
  read_padding_positions(r, c);
  const std::string arch = r.architecture();
  c.head = arch == "MPNetForMaskedLM" ? "lm" : arch == "MPNetForSequenceClassification" ? "classification" : "base";
}

// ModernBertConfig: no biases but where attention_bias, mlp_bias, norm_bias, classifier_bias and
// decoder_bias say; every global_attn_every_n_layers-th layer (from the first) attends globally,
// the others within local_attention tokens; a GeGLU MLP of intermediate_size.
void read_modernbert(const Reader& r, ModelConfig& c) {
  c.layers = r.i({"num_hidden_layers"}, true);
  c.hidden = r.i({"hidden_size"}, true);
  c.heads = r.i({"num_attention_heads"}, true);
  c.ffn = r.i({"intermediate_size"}, true);
  c.vocab = r.i({"vocab_size"}, true);
  c.max_positions = r.i({"max_position_embeddings"}, false, 8192);
  c.layer_norm_eps = r.f({"norm_eps"}, 1e-5);
  c.activation = r.s({"hidden_activation"}, "gelu");
  c.qkv_bias = c.o_bias = r.b("attention_bias", false);
  c.mlp_bias = r.b("mlp_bias", false);
  c.norm_bias = r.b("norm_bias", false);
  c.dropout = static_cast<float>(r.f({"mlp_dropout"}, 0.0));
  c.attn_dropout = static_cast<float>(r.f({"attention_dropout"}, 0.0));
  c.num_labels = r.i({"num_labels"}, false, 2);
  c.encoder_head.dense_bias = r.b("classifier_bias", false);
  c.encoder_head.decoder_bias = r.b("decoder_bias", true);
  c.encoder_head.activation = r.s({"classifier_activation"}, "gelu");
  c.encoder_head.embedding_dropout = static_cast<float>(r.f({"embedding_dropout"}, 0.0));
  c.encoder_head.classifier_dropout = static_cast<float>(r.f({"classifier_dropout"}, 0.0));
  const std::string pooling = r.s({"classifier_pooling"}, "cls");
  if (pooling != "cls" && pooling != "mean")
    throw InputError(r.path + ": classifier_pooling must be cls or mean, got '" + pooling + "'");
  c.encoder_head.mean_pooling = pooling == "mean";
  const int64_t every = r.i({"global_attn_every_n_layers"}, false, 3);
  c.sliding_window = r.i({"local_attention"}, false, 128);
  if (every < 1 || c.sliding_window < 2)
    throw InputError(r.path + ": global_attn_every_n_layers must be at least 1 and local_attention at least 2");
  c.sliding_layers.assign(static_cast<size_t>(std::max<int64_t>(c.layers, 0)), false);
  for (int64_t l = 0; l < c.layers; ++l) c.sliding_layers[static_cast<size_t>(l)] = l % every != 0;
  const std::string arch = r.architecture();
  c.head = arch == "ModernBertForMaskedLM"                   ? "lm"
           : arch == "ModernBertForSequenceClassification" ? "classification"
                                                           : "base";
}

// pos_att_type as DebertaConfig and DebertaV2Config take it: a list, or one string of types
// separated by '|' ("c2p|p2c"), lower-cased, each stripped.
void read_pos_att_type(const Reader& r, ModelConfig::Disentangled& d) {
  std::vector<std::string> types;
  if (auto t = r.j.find("pos_att_type"); t != r.j.end() && t->is_array()) {
    for (const auto& e : *t)
      if (e.is_string()) types.push_back(e.get<std::string>());
  } else {
    const std::string all = r.s({"pos_att_type"}, "");
    for (size_t from = 0, bar = 0; from <= all.size(); from = bar + 1) {
      bar = std::min(all.find('|', from), all.size());
      types.push_back(all.substr(from, bar - from));
    }
  }
  for (std::string t : types) {
    std::transform(t.begin(), t.end(), t.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
    t.erase(0, t.find_first_not_of(" \t"));
    t.erase(t.find_last_not_of(" \t") + 1);
    d.c2p = d.c2p || t == "c2p";
    d.p2c = d.p2c || t == "p2c";
  }
}

// max_relative_positions: below 1 (-1 in the configs) it means max_position_embeddings.
int64_t read_max_relative(const Reader& r, int64_t max_positions) {
  auto it = r.j.find("max_relative_positions");
  if (it == r.j.end() || it->is_null()) return max_positions;
  if (!it->is_number_integer()) throw InputError(r.path + ": field 'max_relative_positions' must be an integer");
  const int64_t v = it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(kMaxConfigInt) ? kMaxConfigInt + 1
                                                                                                : it->get<int64_t>();
  if (v > kMaxConfigInt) throw InputError(r.path + ": field 'max_relative_positions' is beyond 2^31 - 1");
  return v >= 1 ? v : max_positions;
}

// The fields DebertaConfig and DebertaV2Config share: BertConfig's sizes, no token types unless
// type_vocab_size, embedding_size, absolute positions unless position_biased_input is false,
// max_relative_positions, pos_att_type and the pooler's activation.
void read_disentangled(const Reader& r, ModelConfig& c) {
  read_bert(r, c);
  c.type_vocab = r.i({"type_vocab_size"}, false, 0);
  c.layer_norm_eps = r.f({"layer_norm_eps"}, 1e-7);
  c.embed_dim = r.i({"embedding_size"}, false, c.hidden);
  auto& d = c.deberta;
  d.position_input = r.b("position_biased_input", true);
  d.max_relative = read_max_relative(r, c.max_positions);
  read_pos_att_type(r, d);
  c.encoder_head.activation = r.s({"pooler_hidden_act"}, "gelu");
}

// DebertaV2Config (DeBERTa-v2 and v3): disentangled relative attention (position_buckets,
// max_relative_positions, pos_att_type, norm_rel_ebd) with the query and key projections shared
// by the positions (share_att_key); the head by the architecture (a sequence classifier without
// one, as BERT).
void read_deberta_v2(const Reader& r, ModelConfig& c) {
  read_disentangled(r, c);
  if (!r.b("relative_attention", false) || !r.b("share_att_key", false) || r.i({"conv_kernel_size"}, false, 0) > 0)
    throw InputError(r.path + ": DeBERTa is built with relative_attention and share_att_key and without conv_kernel_size "
                              "(DeBERTa-v3 and v2's base and large configs)");
  auto& d = c.deberta;
  d.buckets = r.i({"position_buckets"}, false, 0);
  d.span = d.buckets > 0 ? d.buckets : d.max_relative;
  if (d.span < 2) throw InputError(r.path + ": DeBERTa needs position_buckets or max_relative_positions of at least 2");
  d.norm_rel = r.s({"norm_rel_ebd"}, "none").find("layer_norm") != std::string::npos;
  const std::string arch = r.architecture();
  c.head = arch == "DebertaV2Model"                      ? "base"
           : arch == "DebertaV2ForMaskedLM"              ? "lm"
           : "classification";
}

// DebertaConfig (DeBERTa v1: microsoft/deberta-base, -large, -xlarge): relative attention only
// where relative_attention (DebertaConfig's default is false), relative positions clipped to
// +-max_relative_positions (no buckets, no shared key: pos_proj and pos_q_proj of their own), no
// talking heads; the head by the architecture (a sequence classifier without one, as BERT).
// A sequence longer than max_position_embeddings runs unless absolute positions are added.
void read_deberta(const Reader& r, ModelConfig& c) {
  read_disentangled(r, c);
  auto& d = c.deberta;
  d.v1 = true;
  d.relative = r.b("relative_attention", false);
  d.span = d.max_relative;
  if (r.b("talking_head", false)) throw InputError(r.path + ": DeBERTa with talking_head is not built");
  if (d.position_input && c.max_positions < 1)
    throw InputError(r.path + ": position_biased_input needs max_position_embeddings of at least 1");
  if (d.relative && d.span < 1)
    throw InputError(r.path + ": relative_attention needs max_relative_positions or max_position_embeddings of at least 1");
  c.learned_positions = d.position_input;
  const std::string arch = r.architecture();
  c.head = arch == "DebertaModel" ? "base" : arch == "DebertaForMaskedLM" ? "lm" : "classification";
}

// DistilBertConfig: dim, n_layers, n_heads, hidden_dim; the head by the architecture.
void read_distilbert(const Reader& r, ModelConfig& c) {
  c.layers = r.i({"n_layers"}, true);
  c.hidden = r.i({"dim"}, true);
  c.heads = r.i({"n_heads"}, true);
  c.ffn = r.i({"hidden_dim"}, true);
  c.vocab = r.i({"vocab_size"}, true);
  c.max_positions = r.i({"max_position_embeddings"}, false, 512);
  c.learned_positions = true;
  c.activation = r.s({"activation"}, "gelu");
  c.layer_norm_eps = 1e-12;
  c.dropout = static_cast<float>(r.f({"dropout"}, 0.1));
  c.attn_dropout = static_cast<float>(r.f({"attention_dropout"}, 0.1));
  c.num_labels = r.i({"num_labels"}, false, 2);
  const std::string arch = r.architecture();
  c.head = arch == "DistilBertModel" ? "base" : arch == "DistilBertForMaskedLM" ? "lm" : "classification";
}

// An image classifier's labels: the size of id2label where the config has one
// (PretrainedConfig), else num_labels.
int64_t image_labels(const Reader& r) {
  auto labels = r.j.find("id2label");
  return labels != r.j.end() && labels->is_object() && !labels->empty() ? int64_t(labels->size())
                                                                         : r.i({"num_labels"}, false, 2);
}

// ViTConfig: ViTForImageClassification (the class token's classifier over id2label's labels) or
// ViTModel (its pooler).
void read_vit(const Reader& r, ModelConfig& c) {
  c.layers = r.i({"num_hidden_layers"}, true);
  c.hidden = r.i({"hidden_size"}, true);
  c.heads = r.i({"num_attention_heads"}, true);
  c.ffn = r.i({"intermediate_size"}, true);
  c.image_size = r.i({"image_size"}, false, 224);
  c.patch_size = r.i({"patch_size"}, false, 16);
  c.num_channels = r.i({"num_channels"}, false, 3);
  c.max_positions = builder::image_patches(c.image_size, c.patch_size, c.num_channels, r.path) + 1;
  c.activation = r.s({"hidden_act"}, "gelu");
  c.layer_norm_eps = r.f({"layer_norm_eps"}, 1e-12);
  c.dropout = static_cast<float>(r.f({"hidden_dropout_prob"}, 0.0));
  c.attn_dropout = static_cast<float>(r.f({"attention_probs_dropout_prob"}, 0.0));
  c.qkv_bias = r.b("qkv_bias", true);
  c.num_labels = image_labels(r);
  c.head = r.architecture() == "ViTModel" ? "pooler" : "classification";
}

// DeiTConfig (the distilled DeiT checkpoints; the others are ViT configs): ViTConfig's fields
// and the distillation token. DeiTForImageClassificationWithTeacher (the class token's and the
// distillation token's classifiers, averaged) unless the architecture names DeiTModel (its
// pooler) or DeiTForImageClassification (the class token's classifier).
void read_deit(const Reader& r, ModelConfig& c) {
  read_vit(r, c);
  c.vit.distillation_token = true;
  c.max_positions += 1;
  const std::string arch = r.architecture();
  c.head = arch == "DeiTModel" ? "pooler" : arch == "DeiTForImageClassification" ? "classification" : "distilled";
}

// Dinov2Config: ViT's sizes with an MLP of hidden_size x mlp_ratio features (use_swiglu_ffn: a
// SwiGLU of 2/3 of them rounded up to a multiple of 8), LayerScale on every layer, the mask
// token (use_mask_token), positions for image_size, the image predicted unless set_image_size
// gives another. Dinov2Model (the last hidden state) unless the architecture is
// Dinov2ForImageClassification (the class token beside the patches' mean, classified).
void read_dinov2(const Reader& r, ModelConfig& c) {
  c.layers = r.i({"num_hidden_layers"}, true);
  c.hidden = r.i({"hidden_size"}, true);
  c.heads = r.i({"num_attention_heads"}, true);
  const double ratio = r.f({"mlp_ratio"}, 4.0);
  if (!(ratio > 0) || double(c.hidden) * ratio > double(kMaxConfigInt))
    throw InputError(r.path + ": mlp_ratio must be positive and hidden_size x mlp_ratio at most 2^31 - 1");
  const int64_t features = static_cast<int64_t>(double(c.hidden) * ratio);
  c.vit.swiglu = r.b("use_swiglu_ffn", false);
  c.ffn = c.vit.swiglu ? (features * 2 / 3 + 7) / 8 * 8 : features;
  c.image_size = r.i({"image_size"}, false, 224);
  c.patch_size = r.i({"patch_size"}, false, 14);
  c.num_channels = r.i({"num_channels"}, false, 3);
  c.max_positions = builder::image_patches(c.image_size, c.patch_size, c.num_channels, r.path) + 1;
  c.vit.position_grid = c.image_size / c.patch_size;
  c.activation = r.s({"hidden_act"}, "gelu");
  c.layer_norm_eps = r.f({"layer_norm_eps"}, 1e-6);
  c.dropout = static_cast<float>(r.f({"hidden_dropout_prob"}, 0.0));
  c.attn_dropout = static_cast<float>(r.f({"attention_probs_dropout_prob"}, 0.0));
  c.qkv_bias = r.b("qkv_bias", true);
  c.vit.layer_scale = true;
  c.vit.mask_token = r.b("use_mask_token", true);
  c.num_labels = image_labels(r);
  c.head = r.architecture() == "Dinov2ForImageClassification" ? "classification" : "base";
}

void read_opt(const Reader& r, ModelConfig& c) {
  c.layers = r.i({"num_hidden_layers"}, true);
  c.hidden = r.i({"hidden_size"}, true);
  c.heads = r.i({"num_attention_heads"}, true);
  c.ffn = r.i({"ffn_dim"}, true);
  c.vocab = r.i({"vocab_size"}, true);
  c.max_positions = r.i({"max_position_embeddings"}, false, 2048);
  c.learned_positions = true;
  c.activation = r.s({"activation_function"}, "relu");
  c.dropout = static_cast<float>(r.f({"dropout"}, 0.1));
  c.attn_dropout = static_cast<float>(r.f({"attention_dropout"}, 0.0));
  c.pre_norm = r.b("do_layer_norm_before", true);
  c.embed_dim = r.i({"word_embed_proj_dim"}, false, c.hidden);
  c.tie_embeddings = r.b("tie_word_embeddings", true);
}

// The fields of a T5 encoder-decoder stack (T5Config, SwitchTransformersConfig).
void read_t5_stack(const Reader& r, ModelConfig& c) {
  c.layers = r.i({"num_layers"}, true);
  c.decoder_layers = r.i({"num_decoder_layers"}, false, c.layers);
  c.hidden = r.i({"d_model"}, true);
  c.heads = r.i({"num_heads"}, true);
  c.head_dim = r.i({"d_kv"}, true);
  c.ffn = r.i({"d_ff"}, true);
  c.vocab = r.i({"vocab_size"}, true);
  c.rel_buckets = r.i({"relative_attention_num_buckets"}, false, 32);
  c.layer_norm_eps = r.f({"layer_norm_epsilon"}, 1e-6);
  c.dropout = static_cast<float>(r.f({"dropout_rate"}, 0.1));
  c.attn_dropout = c.dropout;
  c.tie_embeddings = r.b("tie_word_embeddings", true);
  // T5EncoderModel, MT5EncoderModel, SwitchTransformersEncoderModel: the encoder alone.
  const std::string arch = r.architecture();
  if (arch.size() > 12 && arch.compare(arch.size() - 12, 12, "EncoderModel") == 0) c.head = "encoder";
}

void read_switch(const Reader& r, ModelConfig& c) {
  read_t5_stack(r, c);
  c.experts = r.i({"num_experts"}, true);
  c.expert_capacity = r.i({"expert_capacity"}, true);
  c.sparse_step = r.i({"encoder_sparse_step"}, false, 2);
  c.activation = r.s({"dense_act_fn", "feed_forward_proj"}, "relu");
  if (c.experts <= 0 || c.expert_capacity <= 0) throw InputError(r.path + ": num_experts and expert_capacity must be positive");
  // The graph holds the slot numbers 1..capacity as a constant (Switch configs say 64).
  if (c.expert_capacity > kMaxExpertCapacity)
    throw InputError(r.path + ": expert_capacity beyond " + std::to_string(kMaxExpertCapacity) + " slots");
  if (c.sparse_step <= 0) throw InputError(r.path + ": encoder_sparse_step must be positive");
}

// T5 and mT5 (T5 1.0, T5 v1.1, Flan-T5, UL2): the Switch encoder-decoder without experts.
// feed_forward_proj "relu" (T5 1.0) or "gated-gelu" (v1.1, mT5, Flan-T5: gelu_new on wi_0
// times wi_1), as T5Config parses it; the LM head tied to the shared embedding unless
// tie_word_embeddings says not (v1.1 and mT5).
void read_t5(const Reader& r, ModelConfig& c) {
  read_t5_stack(r, c);
  const std::string proj = r.s({"feed_forward_proj"}, "relu");
  const size_t dash = proj.rfind('-');
  c.gated_act = dash != std::string::npos && proj.substr(0, dash) == "gated";
  if (dash != std::string::npos && !c.gated_act)
    throw InputError(r.path + ": feed_forward_proj '" + proj + "' is neither an activation nor gated-ACT");
  c.activation = dash == std::string::npos ? proj : proj.substr(dash + 1);
  if (c.activation == "gelu" && c.gated_act) c.activation = "gelu_new";  // T5Config's gated-gelu
  if (c.rel_buckets < 2) throw InputError(r.path + ": relative_attention_num_buckets must be at least 2");
}

// The sizes of a Whisper or BART-family config: encoder and decoder of one width, their heads
// and feed-forward sizes the same (every released checkpoint's are).
void read_encoder_decoder_sizes(const Reader& r, ModelConfig& c) {
  c.hidden = r.i({"d_model"}, true);
  c.layers = r.i({"encoder_layers"}, true);
  c.decoder_layers = r.i({"decoder_layers"}, true);
  c.heads = r.i({"encoder_attention_heads"}, true);
  c.ffn = r.i({"encoder_ffn_dim"}, true);
  if (r.i({"decoder_attention_heads"}, false, c.heads) != c.heads || r.i({"decoder_ffn_dim"}, false, c.ffn) != c.ffn)
    throw InputError(r.path + ": encoder and decoder with different heads or feed-forward sizes are not built");
  c.vocab = r.i({"vocab_size"}, true);
}

// WhisperConfig (read_encoder_decoder_sizes), its audio input and positions.
void read_whisper(const Reader& r, ModelConfig& c) {
  read_encoder_decoder_sizes(r, c);
  c.mel_bins = r.i({"num_mel_bins"}, false, 80);
  c.source_positions = r.i({"max_source_positions"}, false, 1500);
  c.max_positions = r.i({"max_target_positions"}, false, 448);
  c.learned_positions = true;
  c.activation = r.s({"activation_function"}, "gelu");
  c.layer_norm_eps = 1e-5;
  c.dropout = static_cast<float>(r.f({"dropout"}, 0.0));
  c.attn_dropout = static_cast<float>(r.f({"attention_dropout"}, 0.0));
  c.tie_embeddings = true;
  if (c.layers == 0 || c.decoder_layers == 0 || c.mel_bins == 0 || c.source_positions == 0 || c.max_positions == 0)
    throw InputError(r.path + ": layers, mel bins and positions must be positive");
  // 1500 positions hold 30 s; a bound far above any checkpoint keeps the encoder's shapes sane.
  if (c.source_positions > 65536) throw InputError(r.path + ": max_source_positions above 65,536");
}

// The BART family's configs (BartConfig, MarianConfig, MBartConfig, PegasusConfig, M2M100Config):
// encoder and decoder of one width, heads and feed-forward size (every released checkpoint's
// agree). Per family as its HF model is built: post-LayerNorm layers (BART, Marian) or pre-
// LayerNorm ones with a final LayerNorm per stack; positions learned or sinusoidal, read from
// row 2 (BART, mBART, M2M100) or 0; a LayerNorm over the embeddings (BART, mBART);
// final_logits_bias on the tied head (all but M2M100); Marian's decoder token table of its own
// where share_encoder_decoder_embeddings is false.
void read_bart(const Reader& r, ModelConfig& c) {
  const std::string& t = c.model_type;
  const bool marian = t == "marian";
  c.pre_norm = t == "mbart" || t == "pegasus" || t == "m2m_100";
  read_encoder_decoder_sizes(r, c);
  c.max_positions = r.i({"max_position_embeddings"}, false, marian ? 512 : 1024);
  c.learned_positions = true;
  c.position_offset = marian || t == "pegasus" ? 0 : 2;
  c.embedding_norm = t == "bart" || t == "mbart";
  c.scale_embedding = r.b("scale_embedding", marian);
  c.activation = r.s({"activation_function"}, marian ? "swish" : t == "bart" || t == "mbart" ? "gelu" : "relu");
  c.layer_norm_eps = 1e-5;
  c.dropout = static_cast<float>(r.f({"dropout"}, 0.1));
  c.attn_dropout = static_cast<float>(r.f({"attention_dropout"}, 0.0));
  c.tie_embeddings = r.b("tie_word_embeddings", true);
  c.final_logits_bias = t != "m2m_100";
  if (marian && !r.b("share_encoder_decoder_embeddings", true)) c.decoder_vocab = r.i({"decoder_vocab_size"}, false, c.vocab);
  if (c.decoder_vocab > 0 && c.tie_embeddings)
    throw InputError(r.path + ": a decoder token table of its own tied to the head is not built");
  if (c.layers == 0 || c.decoder_layers == 0 || c.max_positions == 0)
    throw InputError(r.path + ": layers and positions must be positive");
}

void read_sliding_window(const Reader& r, ModelConfig& c);

// Grouped-query attention: the query heads a whole multiple of the KV heads (`field`).
void check_kv_heads(const Reader& r, const ModelConfig& c, const char* field) {
  if (c.kv_heads <= 0 || c.heads % c.kv_heads != 0)
    throw InputError(r.path + ": num_attention_heads must be a multiple of " + field);
}

void read_llama(const Reader& r, ModelConfig& c) {
  c.layers = r.i({"num_hidden_layers"}, true);
  c.hidden = r.i({"hidden_size"}, true);
  c.heads = r.i({"num_attention_heads"}, true);
  c.kv_heads = r.i({"num_key_value_heads"}, false, c.heads);
  c.head_dim = r.i({"head_dim"}, false, 0);
  c.ffn = r.i({"intermediate_size"}, true);
  c.vocab = r.i({"vocab_size"}, true);
  c.max_positions = r.i({"max_position_embeddings"}, false, 4096);
  c.activation = r.s({"hidden_act", "hidden_activation"}, "silu");
  c.layer_norm_eps = r.f({"rms_norm_eps"}, 1e-6);
  c.rope_theta = r.f({"rope_theta"}, 10000.0);
  c.dropout = 0.0f;
  c.attn_dropout = static_cast<float>(r.f({"attention_dropout"}, 0.0));
  c.qkv_bias = r.b("attention_bias", c.model_type == "qwen2" || c.model_type == "qwen2_moe");
  c.gated_mlp_bias = r.b("mlp_bias", false);
  c.tie_embeddings = r.b("tie_word_embeddings", c.model_type.rfind("gemma", 0) == 0);
  check_kv_heads(r, c, "num_key_value_heads");
  read_sliding_window(r, c);
}

// Sliding-window attention of the Llama-style families: the per-layer `layer_types`
// ("sliding_attention" / "full_attention") when given; otherwise Gemma 3's
// sliding_window_pattern, every layer of a Mistral, Mixtral, Phi-3 or StarCoder2 config with a
// sliding_window (null: none), or Qwen2's use_sliding_window layers (from max_window_layers
// on, as its modelling code has it).
// The layers `layer_types` gives `type` (one string per layer, else InputError); false when the
// config has no layer_types list (`listed` says whether it has).
std::vector<bool> layers_of_type(const Reader& r, const ModelConfig& c, const std::string& type, bool* listed = nullptr) {
  std::vector<bool> of(static_cast<size_t>(std::max<int64_t>(c.layers, 0)), false);
  auto it = r.j.find("layer_types");
  if (listed) *listed = it != r.j.end() && it->is_array();
  if (it == r.j.end() || !it->is_array()) return of;
  if (it->size() != of.size())
    throw InputError(r.path + ": layer_types must name one type per layer (" + std::to_string(c.layers) + ")");
  for (size_t l = 0; l < of.size(); ++l) {
    const json& t = (*it)[l];
    if (!t.is_string()) throw InputError(r.path + ": layer_types must list strings");
    of[l] = t.get<std::string>() == type;
  }
  return of;
}

void read_sliding_window(const Reader& r, ModelConfig& c) {
  const int64_t window = r.i({"sliding_window"}, false, 0);
  bool listed = false;
  std::vector<bool> sliding = layers_of_type(r, c, "sliding_attention", &listed);
  const int64_t every = listed ? 0 : r.i({"sliding_window_pattern"}, false, 0);
  if (every > 0) {  // Gemma 3's older configs: every `every`-th layer global, the others sliding
    for (int64_t l = 0; l < c.layers; ++l) sliding[static_cast<size_t>(l)] = (l + 1) % every != 0;
  } else if (!listed && (c.model_type == "mistral" || c.model_type == "mixtral" || c.model_type == "phi3" ||
                         c.model_type == "starcoder2")) {
    std::fill(sliding.begin(), sliding.end(), window > 0);
  } else if (!listed && r.b("use_sliding_window", false)) {
    const int64_t from = r.i({"max_window_layers"}, false, 0);
    for (int64_t l = from; l < c.layers; ++l) sliding[static_cast<size_t>(l)] = true;
  }
  if (std::find(sliding.begin(), sliding.end(), true) == sliding.end()) return;
  if (window <= 0) throw InputError(r.path + ": sliding-window layers need a positive sliding_window");
  c.sliding_window = window;
  c.sliding_layers = std::move(sliding);
}

void check_experts(const Reader& r, const ModelConfig& c) {
  if (c.experts <= 0 || c.experts_per_token <= 0 || c.experts_per_token > c.experts)
    throw InputError(r.path + ": the expert count must be positive and num_experts_per_tok between 1 and it");
  if (c.sparse_step <= 0) throw InputError(r.path + ": decoder_sparse_step must be positive");
}

// Mixtral: a Llama-style decoder whose MLPs are top-k mixtures of SwiGLU experts.
void read_mixtral(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  c.experts = r.i({"num_local_experts"}, true);
  c.experts_per_token = r.i({"num_experts_per_tok"}, false, 2);
  c.sparse_step = 1;
  check_experts(r, c);
}

// The object under "vision_config" in `j`, or an empty one (the tower's defaults alone) when
// there is none; InputError naming `path` when it is something else.
const json& vision_config(const json& j, const std::string& path) {
  static const json kEmpty = json::object();
  auto vc = j.find("vision_config");
  if (vc == j.end() || vc->is_null()) return kEmpty;
  if (!vc->is_object()) throw InputError(path + ": field 'vision_config' must be an object");
  return *vc;
}

// A list of tower layer indices (fullatt_block_indexes, deepstack_visual_indexes) into `out`
// when the config gives one; each must be a layer of the tower.
void read_layer_list(const Reader& v, const char* key, int64_t layers, std::vector<int64_t>& out) {
  if (auto f = v.j.find(key); f != v.j.end() && f->is_array()) {
    out.clear();
    for (const auto& l : *f) {
      if (!l.is_number_integer()) throw InputError(v.path + ": " + key + " must list layer indices");
      out.push_back(l.get<int64_t>());
    }
  }
  for (int64_t l : out)
    if (l < 0 || l >= layers) throw InputError(v.path + ": " + key + " must be layers of the tower");
}

// The vision tower of Qwen2-VL (Qwen2VLVisionConfig's defaults), Qwen2.5-VL
// (Qwen2_5_VLVisionConfig's, with the 7B checkpoint's widths: the class's own hidden_size
// default is the language model's) or Qwen3-VL (Qwen3VLVisionConfig's) from vision_config, on a
// kDefaultImage square image. The processor's pixel bounds are the checkpoints'
// preprocessor_config.json values: Qwen2-VL-7B-Instruct's and Qwen2.5-VL-7B-Instruct's min_pixels
// 3,136 and max_pixels 12,845,056; Qwen3-VL-8B-Instruct's shortest_edge 65,536 and longest_edge
// 16,777,216 (pixel counts).
void read_qwen_vision(const Reader& outer, ModelConfig& c) {
  const bool v25 = c.language_model_of == "qwen2_5_vl", v3 = c.language_model_of.rfind("qwen3_vl", 0) == 0;
  const std::string where = outer.path + " vision_config";
  const Reader v{vision_config(outer.j, outer.path), where};
  ModelConfig::VisionTower& t = c.vision;
  t.kind = ModelConfig::VisionTower::Kind::qwen;
  t.layers = v.i({"depth"}, false, v3 ? 27 : 32);
  t.hidden = v.i({v25 || v3 ? "hidden_size" : "embed_dim"}, false, v3 ? 1152 : 1280);
  t.heads = v.i({"num_heads"}, false, 16);
  t.ffn = v25 || v3 ? v.i({"intermediate_size"}, false, v3 ? 4304 : 3420) : t.hidden * v.i({"mlp_ratio"}, false, 4);
  t.out_hidden = v.i({v25 || v3 ? "out_hidden_size" : "hidden_size"}, false, c.hidden);
  t.patch_size = v.i({"patch_size", "spatial_patch_size"}, false, v3 ? 16 : 14);
  t.temporal_patch = v.i({"temporal_patch_size"}, false, 2);
  t.merge_size = v.i({"spatial_merge_size"}, false, 2);
  t.channels = v.i({"in_channels", "in_chans"}, false, 3);
  t.activation = v.s({"hidden_act"}, v25 ? "silu" : v3 ? "gelu_pytorch_tanh" : "quick_gelu");
  t.layer_norm_eps = 1e-6;
  t.min_pixels = v3 ? 65536 : 3136;
  t.max_pixels = v3 ? 16777216 : 12845056;
  if (v25) {
    t.window_size = v.i({"window_size"}, false, 112);
    t.full_attention_layers = {7, 15, 23, 31};
    read_layer_list(v, "fullatt_block_indexes", t.layers, t.full_attention_layers);
  }
  if (v3) {
    const int64_t positions = v.i({"num_position_embeddings"}, false, 2304);
    t.position_grid = std::llround(std::sqrt(double(positions)));
    if (t.position_grid < 2 || t.position_grid * t.position_grid != positions)
      throw InputError(v.path + ": num_position_embeddings must be a square of at least 4");
    t.deepstack_layers = {8, 16, 24};
    read_layer_list(v, "deepstack_visual_indexes", t.layers, t.deepstack_layers);
  }
  if (t.layers <= 0 || t.hidden <= 0 || t.heads <= 0 || t.hidden % t.heads != 0 || (t.hidden / t.heads) % 4 != 0 ||
      t.ffn <= 0 || t.patch_size <= 0 || t.temporal_patch <= 0 || t.merge_size <= 0 || t.channels <= 0)
    throw InputError(v.path + ": depth, widths, heads (dividing the width into heads of a multiple of 4), patch and "
                              "merge sizes must be positive");
  if (t.out_hidden != c.hidden)
    throw InputError(v.path + ": the merger's output (" + std::to_string(t.out_hidden) +
                     ") must be the language model's hidden size (" + std::to_string(c.hidden) + ")");
  if (v25 && (t.window_size <= 0 || t.window_size % (t.patch_size * t.merge_size) != 0))
    throw InputError(v.path + ": window_size must be a positive multiple of patch_size x spatial_merge_size");
  set_image_size(c, kDefaultImage, kDefaultImage);
}

// Qwen2-VL and Qwen2.5-VL: the language model, Qwen2's (Q, K, V biases; its multimodal
// rotary sections cost as one rotary), whose fields these configs keep at the top level (or in
// text_config), and the vision tower (read_qwen_vision) on one image a sequence.
void read_qwen2_vl(const Reader& outer, ModelConfig& c) {
  json j = outer.j;
  if (auto t = outer.j.find("text_config"); t != outer.j.end() && t->is_object())
    for (auto it = t->begin(); it != t->end(); ++it) j[it.key()] = it.value();
  const Reader r{j, outer.path};
  read_llama(r, c);
  c.qkv_bias = r.b("attention_bias", true);
  c.language_model_of = c.model_type;
  c.model_type = "qwen2";
  read_qwen_vision(outer, c);
}

// Qwen3: a Llama-style decoder with an RMSNorm over each query and key head. Qwen3-VL's
// language model (qwen3_vl_text, qwen3_vl_moe_text: the text_config of a qwen3_vl /
// qwen3_vl_moe config) is Qwen3 (or Qwen3-MoE) whose interleaved multimodal rotary sections
// cost as one rotary; its vision tower and DeepStack are read from the outer config
// (read_qwen_vision).
void read_qwen3(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  c.qk_norm = true;
}

// The routed experts of Qwen2-MoE and Qwen3-MoE: every decoder_sparse_step-th layer but
// mlp_only_layers, experts of moe_intermediate_size.
void read_qwen_experts(const Reader& r, ModelConfig& c, bool normalize_default) {
  c.experts = r.i({"num_experts"}, true);
  c.experts_per_token = r.i({"num_experts_per_tok"}, true);
  c.expert_ffn = r.i({"moe_intermediate_size"}, true);
  c.sparse_step = r.i({"decoder_sparse_step"}, false, 1);
  c.normalize_routing = r.b("norm_topk_prob", normalize_default);
  if (auto it = r.j.find("mlp_only_layers"); it != r.j.end() && it->is_array())
    for (const auto& v : *it) {
      if (!v.is_number_integer()) throw InputError(r.path + ": mlp_only_layers must list layer indices");
      c.dense_layers.push_back(v.get<int64_t>());
    }
  check_experts(r, c);
}

// Qwen2-MoE: Qwen2 whose MoE layers add a shared expert, gated by a sigmoid, to the routed
// ones (top-k probabilities not renormalised by default).
void read_qwen2_moe(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  read_qwen_experts(r, c, false);
  c.shared_expert_ffn = r.i({"shared_expert_intermediate_size"}, false, 0);
}

// Qwen3-MoE: Qwen3 whose MLPs (every decoder_sparse_step-th layer but mlp_only_layers) are
// top-k mixtures of SwiGLU experts of moe_intermediate_size.
void read_qwen3_moe(const Reader& r, ModelConfig& c) {
  read_qwen3(r, c);
  read_qwen_experts(r, c, true);
}

// gpt-oss: a decoder of top-k routed SwiGLU experts (num_local_experts, experts_per_token,
// each of intermediate_size) with biases on the attention projections (o_proj included),
// the router and the experts; alternating sliding-window (layer_types) and full attention;
// MXFP4 experts when quantization_config says so (4-bit weights, one 1-byte scale per 32).
// Its per-head attention sinks (one learned logit in each softmax's denominator) and the
// clamped SwiGLU (alpha 1.702, limit 7) cost as the plain softmax and SwiGLU do and are
// built as those.
void read_gpt_oss(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  c.qkv_bias = c.o_bias = r.b("attention_bias", true);
  c.expert_bias = true;
  c.experts = r.i({"num_local_experts"}, true);
  c.experts_per_token = r.i({"experts_per_token", "num_experts_per_tok"}, false, 4);
  c.sparse_step = 1;
  c.normalize_routing = true;  // softmax over the top-k logits
  if (auto it = r.j.find("quantization_config"); it != r.j.end() && it->is_object()) {
    const auto m = it->find("quant_method");
    if (m != it->end() && m->is_string() && m->get<std::string>() == "mxfp4") {
      c.expert_weight_bits = 4;
      c.expert_block = 32;
    }
  }
  check_experts(r, c);
}

// Gemma 3 (text): a Llama-style decoder with GQA, each query and key head RMS-normalised,
// RMSNorms before and after both the attention and the GeGLU MLP (gelu_pytorch_tanh), the
// embedding scaled by sqrt(hidden), and five sliding-window layers to one global one
// (layer_types or sliding_window_pattern). The multimodal `gemma3` config nests these under
// text_config: its language model is built (the vision tower and projector are not).
// A multimodal config's vision tower into the language model's config (defined below).
void read_vision_tower(const json& j, const std::string& path, ModelConfig& lm);

void read_gemma3(const Reader& outer, ModelConfig& c) {
  // Gemma3TextConfig's defaults for the fields a config leaves out (the multimodal configs'
  // text_config lists few), then the config's own.
  json j = {{"vocab_size", 262208}, {"head_dim", 256}, {"hidden_activation", "gelu_pytorch_tanh"},
            {"rms_norm_eps", 1e-6}, {"sliding_window", 4096}, {"hidden_size", 2304}, {"intermediate_size", 9216},
            {"num_hidden_layers", 26}, {"num_attention_heads", 8}, {"num_key_value_heads", 4},
            {"max_position_embeddings", 131072}, {"rope_theta", 1000000.0}};
  const json* own = &outer.j;
  if (c.model_type == "gemma3") {
    auto t = outer.j.find("text_config");
    if (t == outer.j.end() || !t->is_object()) throw InputError(outer.path + ": gemma3 config without a text_config object");
    own = &*t;
  }
  for (auto it = own->begin(); it != own->end(); ++it) j[it.key()] = it.value();
  if (!j.contains("layer_types") && !j.contains("sliding_window_pattern")) j["sliding_window_pattern"] = 6;
  const Reader r{j, outer.path};
  read_llama(r, c);
  c.qk_norm = true;
  c.sandwich_norm = true;
  c.scale_embedding = true;
  if (c.model_type == "gemma3") {  // Gemma3ForConditionalGeneration: its SigLIP tower too
    c.language_model_of = "gemma3";
    read_vision_tower(outer.j, outer.path, c);
  }
}

// Gemma (1) and Gemma 2: Llama-style decoders with heads of head_dim (256), a GeGLU MLP
// (gelu_pytorch_tanh, whatever hidden_act says: HF's Gemma runs that one) and the embedding
// scaled by sqrt(hidden). Gemma 2 adds the sandwich norms of Gemma 3, sliding-window
// attention on every other layer (the first of each pair; layer_types when given) and
// soft-capped attention scores and logits (attn_logit_softcapping, final_logit_softcapping;
// null: none). Its query_pre_attn_scalar changes the scores' scale, not their cost.
void read_gemma(const Reader& outer, ModelConfig& c) {
  const bool v2 = c.model_type == "gemma2";
  json j = {{"head_dim", 256}, {"rms_norm_eps", 1e-6}};
  if (v2) j.update({{"sliding_window", 4096}, {"attn_logit_softcapping", 50.0}, {"final_logit_softcapping", 30.0}});
  for (auto it = outer.j.begin(); it != outer.j.end(); ++it)
    j[it.key()] = it.value().is_null() && (it.key() == "attn_logit_softcapping" || it.key() == "final_logit_softcapping")
                      ? json(0.0)
                      : it.value();
  j["hidden_activation"] = "gelu_pytorch_tanh";
  j.erase("hidden_act");
  if (v2 && !j.contains("layer_types") && j.contains("num_hidden_layers") && j["num_hidden_layers"].is_number_integer()) {
    const int64_t layers = std::clamp<int64_t>(j["num_hidden_layers"].get<int64_t>(), 0, kMaxLayers);
    json types = json::array();
    for (int64_t l = 0; l < layers; ++l) types.push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
  }
  const Reader r{j, outer.path};
  read_llama(r, c);
  c.scale_embedding = true;
  if (!v2) return;
  c.sandwich_norm = true;
  c.attn_softcap = r.f({"attn_logit_softcapping"}, 0);
  c.final_softcap = r.f({"final_logit_softcapping"}, 0);
  if (c.attn_softcap < 0 || c.final_softcap < 0) throw InputError(r.path + ": soft-capping values must be positive or null");
}

void check_rotary_fraction(const Reader& r, const ModelConfig& c) {
  if (!(c.rotary_fraction > 0 && c.rotary_fraction <= 1))
    throw InputError(r.path + ": the rotary fraction of a head (partial_rotary_factor, rotary_pct) must be in (0, 1]");
}

// Phi-3 (Phi-3, Phi-3.5, Phi-4): a Llama-style decoder whose Q, K and V projections are one
// GEMM (qkv_proj) and whose gate and up projections are one (gate_up_proj), as HF's Phi3 runs
// them; rotary on partial_rotary_factor of each head when given (1 otherwise).
void read_phi3(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  c.fused_qkv_blocks = c.fused_gate_up = true;
  c.rotary_fraction = r.f({"partial_rotary_factor"}, 1.0);
  check_rotary_fraction(r, c);
}

// Phi (phi-1, phi-1.5, phi-2): see ModelConfig::parallel_block. qk_layernorm (off in every
// released checkpoint) is not built.
void read_phi(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  c.activation = r.s({"hidden_act"}, "gelu_new");
  c.layer_norm_eps = r.f({"layer_norm_eps"}, 1e-5);
  c.rotary_fraction = r.f({"partial_rotary_factor"}, 0.5);
  c.dropout = static_cast<float>(r.f({"resid_pdrop"}, 0.0));
  c.qkv_bias = c.o_bias = c.head_bias = true;
  c.layer_norm = c.dense_mlp = true;
  c.parallel_block = 1;
  c.max_positions = r.i({"max_position_embeddings"}, false, 2048);
  check_rotary_fraction(r, c);
}

// GPT-NeoX (GPT-NeoX-20B, Pythia): see ModelConfig::parallel_block; the fused
// query_key_value projection, dense (biased), a GELU MLP, an untied unbiased embed_out.
void read_gpt_neox(const Reader& r, ModelConfig& c) {
  c.layers = r.i({"num_hidden_layers"}, true);
  c.hidden = r.i({"hidden_size"}, true);
  c.heads = r.i({"num_attention_heads"}, true);
  c.kv_heads = c.heads;
  c.ffn = r.i({"intermediate_size"}, true);
  c.vocab = r.i({"vocab_size"}, true);
  c.max_positions = r.i({"max_position_embeddings"}, false, 2048);
  c.activation = r.s({"hidden_act"}, "gelu");
  c.layer_norm_eps = r.f({"layer_norm_eps"}, 1e-5);
  c.rope_theta = r.f({"rotary_emb_base", "rope_theta"}, 10000.0);
  c.rotary_fraction = r.f({"rotary_pct", "partial_rotary_factor"}, 0.25);
  c.dropout = static_cast<float>(r.f({"hidden_dropout"}, 0.0));
  c.attn_dropout = static_cast<float>(r.f({"attention_dropout"}, 0.0));
  c.qkv_bias = c.o_bias = r.b("attention_bias", true);
  c.layer_norm = c.dense_mlp = c.fused_qkv = true;
  c.parallel_block = r.b("use_parallel_residual", true) ? 2 : 0;
  c.tie_embeddings = r.b("tie_word_embeddings", false);
  check_rotary_fraction(r, c);
}

// GPT-J: see ModelConfig::parallel_block (one LayerNorm read by the attention and the MLP),
// rotary on the first rotary_dim of each head, unbiased Q, K, V and output projections, a
// biased GELU MLP (fc_in, fc_out) and a biased, untied LM head. Its rotary pairs neighbouring
// dims (rotate_every_two) where the graph pairs the two halves (rotate_half): the same
// elementwise passes over the same elements.
void read_gptj(const Reader& r, ModelConfig& c) {
  read_gpt2(r, c);  // GPT-2's field names; GPTJConfig's defaults below
  c.learned_positions = false;  // rotary
  c.kv_heads = c.heads;
  c.max_positions = r.i({"n_positions", "max_position_embeddings"}, false, 2048);
  c.dropout = static_cast<float>(r.f({"resid_pdrop"}, 0.0));
  c.attn_dropout = static_cast<float>(r.f({"attn_pdrop"}, 0.0));
  if (c.heads > 0 && c.hidden % c.heads == 0) {
    const int64_t hd = c.hidden / c.heads;
    const int64_t rd = r.i({"rotary_dim"}, false, hd);
    if (rd <= 0 || rd > hd || rd % 2 != 0)
      throw InputError(r.path + ": rotary_dim must be even and between 2 and the head size (" + std::to_string(hd) + ")");
    c.rotary_fraction = double(rd) / double(hd);
  }
  c.qkv_bias = c.o_bias = false;
  c.head_bias = true;
  c.layer_norm = c.dense_mlp = true;
  c.parallel_block = 1;
  c.tie_embeddings = r.b("tie_word_embeddings", false);
}

// Falcon (Falcon-7B/40B/180B, Falcon 2): LayerNorms, rotary on the whole head, one fused
// query_key_value GEMM, a GELU MLP (dense_h_to_4h, dense_4h_to_h), biases only where `bias`
// says (none in the released models), a tied LM head. The attention and the MLP run side by
// side (parallel_attn): the new decoder architecture (40B, 180B) gives each its own norm
// (ln_attn, ln_mlp; num_ln_in_parallel_attn 2) and num_kv_heads KV heads, the original
// (7B) shares one norm and one KV head (multi_query). The fused GEMM's output is laid out per
// head ([q k v] per head) without grouping, as [q | k | v] blocks otherwise (the new
// architecture's per-group [q.. k v] layout costs the same views). Falcon-RW uses ALiBi.
void read_falcon(const Reader& r, ModelConfig& c) {
  c.layers = r.i({"num_hidden_layers", "n_layer"}, true);
  c.hidden = r.i({"hidden_size"}, true);
  c.heads = r.i({"num_attention_heads", "n_head"}, true);
  // The original checkpoints' model types: RefinedWeb (40B) is the new architecture,
  // RefinedWebModel (7B) the original.
  const bool new_arch = r.b("new_decoder_architecture", c.model_type == "RefinedWeb");
  const bool multi_query = r.b("multi_query", true);
  if (new_arch) c.kv_heads = r.i({"num_kv_heads", "n_head_kv"}, false, c.heads);
  else c.kv_heads = multi_query ? 1 : c.heads;
  c.ffn = r.i({"ffn_hidden_size"}, false, 0);
  if (c.ffn == 0) c.ffn = 4 * c.hidden;
  c.vocab = r.i({"vocab_size"}, true);
  c.max_positions = r.i({"max_position_embeddings"}, false, 2048);
  c.activation = r.s({"activation"}, "gelu");
  c.layer_norm_eps = r.f({"layer_norm_epsilon"}, 1e-5);
  c.rope_theta = r.f({"rope_theta"}, 10000.0);
  c.dropout = static_cast<float>(r.f({"hidden_dropout"}, 0.0));
  c.attn_dropout = static_cast<float>(r.f({"attention_dropout"}, 0.0));
  c.alibi = r.b("alibi", false);  // Falcon-RW
  c.qkv_bias = c.o_bias = c.mlp_bias = r.b("bias", false);
  c.layer_norm = c.dense_mlp = true;
  c.tie_embeddings = r.b("tie_word_embeddings", true);
  if (new_arch) c.parallel_block = r.i({"num_ln_in_parallel_attn"}, false, 2) == 1 ? 1 : 2;
  else c.parallel_block = r.b("parallel_attn", true) ? 1 : 0;
  if (c.kv_heads == c.heads) c.fused_qkv = true;
  else c.fused_qkv_blocks = true;
  check_kv_heads(r, c, "num_kv_heads");
}

// StarCoder2: a Llama-style decoder (grouped-query attention, rotary) with LayerNorms, biases
// on every projection (use_bias), a dense tanh-GELU MLP (c_fc, c_proj), sliding-window
// attention on every layer (sliding_window; null: none) and a tied LM head.
void read_starcoder2(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  c.activation = r.s({"hidden_act"}, "gelu_pytorch_tanh");
  c.layer_norm_eps = r.f({"norm_epsilon", "layer_norm_eps"}, 1e-5);
  c.qkv_bias = c.o_bias = c.mlp_bias = r.b("use_bias", true);
  c.dropout = static_cast<float>(r.f({"residual_dropout"}, 0.0));
  c.layer_norm = c.dense_mlp = true;
  c.tie_embeddings = r.b("tie_word_embeddings", true);
}

// GPTBigCode (StarCoder, SantaCoder, WizardCoder): GPT-2's block (LayerNorms, biased
// projections, a tanh-GELU MLP, learned positions, a tied head) with one fused c_attn whose
// output is [q | k | v] over a single KV head (multi_query; all heads without it). HF's eager
// MQA folds the heads into the query rows of one batched GEMM; the graph repeats the KV head
// as Llama's do (the same FLOPs, a copy of the keys more in eager; none fused).
void read_gpt_bigcode(const Reader& r, ModelConfig& c) {
  read_gpt2(r, c);
  c.max_positions = r.i({"n_positions", "max_position_embeddings"}, false, 8192);
  c.activation = r.s({"activation_function"}, "gelu_pytorch_tanh");
  c.kv_heads = r.b("multi_query", true) ? 1 : c.heads;
  c.qkv_bias = c.o_bias = true;
  c.layer_norm = c.dense_mlp = c.fused_qkv_blocks = c.learned_positions = true;
  c.tie_embeddings = r.b("tie_word_embeddings", true);
}

// InternLM2 (InternLM2, InternLM2.5): a Llama-style decoder whose Q, K and V projections are
// one wqkv GEMM (its output grouped per KV head, [q.. k v]; built as [q | k | v] blocks, the
// same GEMM and views), biases where `bias` says.
void read_internlm2(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  c.fused_qkv_blocks = true;
  c.qkv_bias = c.o_bias = r.b("bias", false);
}

// OLMo 2: a Llama-style decoder with its RMSNorms after the attention and the MLP (not before),
// and the query and key projections RMS-normalised whole before the heads split.
void read_olmo2(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  c.post_norm = c.qk_norm_full = true;
  c.qkv_bias = c.o_bias = r.b("attention_bias", false);
}

// Nemotron (Nemotron-4, Minitron): LayerNorm1P norms (a LayerNorm with bias; the + 1 on its
// weight costs nothing), a dense squared-ReLU MLP (up_proj, relu2, down_proj) without biases
// unless mlp_bias, partial rotary (partial_rotary_factor), grouped-query attention.
void read_nemotron(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  c.activation = r.s({"hidden_act"}, "relu2");
  c.layer_norm_eps = r.f({"norm_eps", "layer_norm_eps"}, 1e-5);
  c.layer_norm = c.dense_mlp = true;
  c.mlp_bias = r.b("mlp_bias", false);
  c.qkv_bias = c.o_bias = r.b("attention_bias", false);
  c.rotary_fraction = r.f({"partial_rotary_factor"}, 0.5);
  check_rotary_fraction(r, c);
}

// OLMoE: OLMo's mixture, a Llama-style decoder whose query and key projections are
// RMS-normalised whole (OLMo 2's q_norm / k_norm) and whose MLPs are top-k mixtures of
// num_experts SwiGLU experts of intermediate_size (probabilities not renormalised by default).
void read_olmoe(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  c.qk_norm_full = true;
  c.experts = r.i({"num_experts"}, true);
  c.experts_per_token = r.i({"num_experts_per_tok"}, true);
  c.sparse_step = 1;
  c.normalize_routing = r.b("norm_topk_prob", false);
  c.qkv_bias = c.o_bias = r.b("attention_bias", false);
  check_experts(r, c);
}

// Phi-3.5-MoE (phimoe): Mixtral's mixture with LayerNorms, biased Q, K, V and output
// projections and a biased LM head; its sparsemixer routing costs as top-k.
void read_phimoe(const Reader& r, ModelConfig& c) {
  read_mixtral(r, c);
  c.layer_norm_eps = r.f({"rms_norm_eps", "layer_norm_eps"}, 1e-5);
  c.layer_norm = true;
  c.qkv_bias = c.o_bias = r.b("attention_bias", true);
  c.head_bias = r.b("lm_head_bias", true);
}

// Granite's constant scales (embedding, residual branches, logits) and its tied head.
void read_granite_scales(const Reader& r, ModelConfig& c) {
  c.embedding_multiplier = r.f({"embedding_multiplier"}, 1.0);
  c.residual_multiplier = r.f({"residual_multiplier"}, 1.0);
  const double logits_scaling = r.f({"logits_scaling"}, 1.0);
  if (!(c.embedding_multiplier > 0) || !(c.residual_multiplier > 0) || !(logits_scaling > 0))
    throw InputError(r.path + ": embedding_multiplier, residual_multiplier and logits_scaling must be positive");
  c.logits_multiplier = 1.0 / logits_scaling;
  c.tie_embeddings = r.b("tie_word_embeddings", true);
}

// Granite (Granite 3.x; granitemoe: its mixture): a Llama-style decoder (a Mixtral one) whose
// embedding, residual branches and logits are scaled by constants (embedding_multiplier,
// residual_multiplier, 1 / logits_scaling), each a kernel of its own in eager PyTorch;
// attention_multiplier replaces 1 / sqrt(head size), the same cost.
void read_granite(const Reader& r, ModelConfig& c) {
  if (c.model_type == "granitemoe") read_mixtral(r, c);
  else read_llama(r, c);
  read_granite_scales(r, c);
}

// Cohere (Command-R, Command-R+): the attention and a SwiGLU MLP side by side on one
// LayerNorm without bias (parallel_block 1), Q and K heads LayerNorm-ed when use_qk_norm
// (Command-R+), the logits times logit_scale, a tied LM head. Its rotary pairs neighbouring
// dims (as GPT-J's), the same passes.
void read_cohere(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  c.layer_norm_eps = r.f({"layer_norm_eps"}, 1e-5);
  c.layer_norm = true;
  c.norm_bias = false;
  c.parallel_block = 1;
  c.qk_norm = r.b("use_qk_norm", false);
  c.qkv_bias = c.o_bias = r.b("attention_bias", false);
  c.logits_multiplier = r.f({"logit_scale"}, 0.0625);
  if (!(c.logits_multiplier > 0)) throw InputError(r.path + ": logit_scale must be positive");
  c.tie_embeddings = r.b("tie_word_embeddings", true);
}

// Cohere 2 (Command R7B, Command A): Cohere's parallel block, three sliding-window layers with
// rotary to one global layer without positions (sliding_window_pattern 4, or layer_types).
void read_cohere2(const Reader& r, ModelConfig& c) {
  if (!r.j.contains("layer_types") && !r.j.contains("sliding_window_pattern")) {
    json j = r.j;
    j["sliding_window_pattern"] = 4;
    read_cohere(Reader{j, r.path}, c);
  } else {
    read_cohere(r, c);
  }
  c.rotary_sliding_only = true;
}

// BLOOM: ALiBi instead of positions, a LayerNorm on the embedding, LayerNorms, a fused
// query_key_value GEMM laid out per head (GPT-NeoX's), a biased tanh-GELU MLP (dense_h_to_4h,
// dense_4h_to_h) in sequence, a tied LM head. apply_residual_connection_post_layernorm
// changes which tensor the residual adds, not what runs.
void read_bloom(const Reader& r, ModelConfig& c) {
  c.layers = r.i({"n_layer", "num_hidden_layers"}, true);
  c.hidden = r.i({"hidden_size", "n_embed"}, true);
  c.heads = r.i({"n_head", "num_attention_heads"}, true);
  c.kv_heads = c.heads;
  c.ffn = 4 * c.hidden;
  c.vocab = r.i({"vocab_size"}, true);
  c.max_positions = r.i({"seq_length", "max_position_embeddings"}, false, 2048);
  c.activation = "gelu_new";  // bloom_gelu_forward: the tanh approximation
  c.layer_norm_eps = r.f({"layer_norm_epsilon"}, 1e-5);
  c.dropout = static_cast<float>(r.f({"hidden_dropout"}, 0.0));
  c.attn_dropout = static_cast<float>(r.f({"attention_dropout"}, 0.0));
  c.qkv_bias = c.o_bias = true;
  c.layer_norm = c.dense_mlp = c.fused_qkv = c.alibi = c.embedding_norm = true;
  c.tie_embeddings = r.b("tie_word_embeddings", true);
}

// MPT (MPT-7B, MPT-30B): ALiBi, LayerNorms without biases and projections without biases
// (no_bias), one Wqkv GEMM chunked into [q | k | v], an exact-GELU MLP (up_proj, down_proj)
// of expansion_ratio, a tied LM head. attn_config's qk_ln (off in the released models) is not
// built; a config without ALiBi (learned positions) is refused.
void read_mpt(const Reader& r, ModelConfig& c) {
  c.layers = r.i({"n_layers", "num_hidden_layers"}, true);
  c.hidden = r.i({"d_model", "hidden_size"}, true);
  c.heads = r.i({"n_heads", "num_attention_heads"}, true);
  c.kv_heads = c.heads;
  c.ffn = r.i({"expansion_ratio"}, false, 4) * c.hidden;
  c.vocab = r.i({"vocab_size"}, true);
  c.max_positions = r.i({"max_seq_len"}, false, 2048);
  c.activation = "gelu";
  c.layer_norm_eps = r.f({"layer_norm_epsilon"}, 1e-5);
  c.dropout = static_cast<float>(r.f({"resid_pdrop"}, 0.0));
  const bool no_bias = r.b("no_bias", true);
  c.qkv_bias = c.o_bias = c.mlp_bias = c.norm_bias = !no_bias;
  c.layer_norm = c.dense_mlp = c.fused_qkv_blocks = true;
  c.tie_embeddings = true;
  bool alibi = true;
  if (auto a = r.j.find("attn_config"); a != r.j.end() && a->is_object()) {
    const Reader ar{*a, r.path};
    alibi = ar.b("alibi", true);
    c.attn_dropout = static_cast<float>(ar.f({"attn_pdrop"}, 0.0));
  }
  if (!alibi) throw InputError(r.path + ": MPT without ALiBi (attn_config.alibi false) is not supported");
  c.alibi = true;
}

// The mixture of DeepSeek-V3's configs: the first first_k_dense_replace layers dense, the rest
// top-k of n_routed_experts (every moe_layer_freq-th) with n_shared_experts always on (one
// dense SwiGLU of their combined width, ungated), and num_nextn_predict_layers draft layers.
void read_deepseek_experts(const Reader& r, ModelConfig& c) {
  c.experts = r.i({"n_routed_experts"}, true);
  c.experts_per_token = r.i({"num_experts_per_tok"}, true);
  c.expert_ffn = r.i({"moe_intermediate_size"}, true);
  c.sparse_step = r.i({"moe_layer_freq"}, false, 1);
  c.normalize_routing = r.b("norm_topk_prob", true);
  c.shared_expert_ffn = r.i({"n_shared_experts"}, false, 0) * c.expert_ffn;
  c.shared_expert_gate = false;
  const int64_t dense = r.i({"first_k_dense_replace"}, false, 0);
  for (int64_t l = 0; l < std::min(dense, c.layers); ++l) c.dense_layers.push_back(l);
  c.mtp_layers = r.i({"num_nextn_predict_layers"}, false, 0);
  check_experts(r, c);
}

// DeepSeek-V3 (and R1, Kimi K2; DeepSeek-V2, whose softmax router and greedy top-k cost as
// V3's sigmoid and group-limited one): multi-head latent attention, the first first_k_dense_replace
// layers dense, the rest top-k of n_routed_experts with n_shared_experts always on (one dense
// SwiGLU of their combined width, ungated). Its router's sigmoid scores and group-limited
// top-k cost as the MoE operator's routing; the multi-token-prediction layer is counted
// (mtp_layers) for speculative decoding's draft, not built into the model.
void read_deepseek_v3(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  c.q_lora_rank = r.i({"q_lora_rank"}, false, 0);
  c.kv_lora_rank = r.i({"kv_lora_rank"}, true);
  c.qk_nope_dim = r.i({"qk_nope_head_dim"}, true);
  c.qk_rope_dim = r.i({"qk_rope_head_dim"}, true);
  c.v_head_dim = r.i({"v_head_dim"}, true);
  if (c.kv_lora_rank <= 0 || c.qk_nope_dim <= 0 || c.qk_rope_dim <= 0 || c.qk_rope_dim % 2 != 0 || c.v_head_dim <= 0)
    throw InputError(r.path + ": kv_lora_rank, qk_nope_head_dim, v_head_dim and an even qk_rope_head_dim must be positive");
  c.head_dim = c.qk_nope_dim + c.qk_rope_dim;
  read_deepseek_experts(r, c);
}

// The rotary layers of a decoder whose other layers use no positions (Llama 4, SmolLM3):
// no_rope_layers (1: rotary) when listed, else every no_rope_layer_interval-th layer (4 by
// default) without. They are built as Cohere 2's are, the rotary layers as sliding-window
// ones: `window` keys (Llama 4's chunks), or all of them (a window of max_position_embeddings).
void read_rotary_layers(const Reader& r, ModelConfig& c, int64_t window) {
  std::vector<bool> rope(static_cast<size_t>(c.layers), true);
  if (auto it = r.j.find("no_rope_layers"); it != r.j.end() && it->is_array() && !it->empty()) {
    if (it->size() != rope.size())
      throw InputError(r.path + ": no_rope_layers must mark every layer (" + std::to_string(c.layers) + ")");
    for (size_t l = 0; l < rope.size(); ++l) {
      const json& v = (*it)[l];
      if (!v.is_number_integer() && !v.is_boolean()) throw InputError(r.path + ": no_rope_layers must list 0 or 1");
      rope[l] = v.is_boolean() ? v.get<bool>() : v.get<int64_t>() != 0;
    }
  } else {
    const int64_t every = r.i({"no_rope_layer_interval"}, false, 4);
    for (int64_t l = 0; l < c.layers; ++l) rope[static_cast<size_t>(l)] = every <= 0 || (l + 1) % every != 0;
  }
  c.sliding_window = window > 0 ? window : std::max<int64_t>(c.max_positions, 1);
  c.sliding_layers = rope;
  c.rotary_sliding_only = true;
}

// SmolLM3: Llama with every fourth layer (no_rope_layers) without positions.
void read_smollm3(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  if (c.sliding_window > 0)
    throw InputError(r.path + ": SmolLM3 with sliding-window layers (use_sliding_window) is not supported");
  read_rotary_layers(r, c, 0);
}

void check_mamba2_mixer(const Reader& r, const ModelConfig& c) {
  if (c.mamba_heads <= 0 || c.mamba_head_dim <= 0 || c.ssm_state <= 0 || c.ssm_groups <= 0 || c.conv_kernel < 2 ||
      c.ssm_chunk <= 0 || c.mamba_heads % c.ssm_groups != 0)
    throw InputError(r.path + ": Mamba-2 heads, head size, state size, chunk size, a convolution of at least 2 and groups "
                              "dividing the heads must be positive");
}

// The Mamba-2 mixers' fields (Mamba2Config's; NemotronHConfig's mamba_* ones and ssm_state_size).
void read_mamba2_mixer(const Reader& r, ModelConfig& c, bool nemotron) {
  c.mamba_heads = r.i({nemotron ? "mamba_num_heads" : "num_heads"}, true);
  c.mamba_head_dim = r.i({nemotron ? "mamba_head_dim" : "head_dim"}, false, 64);
  c.ssm_state = r.i({"ssm_state_size", "state_size"}, false, 128);
  c.ssm_groups = r.i({"mamba_n_groups", "n_groups"}, false, nemotron ? 8 : 1);
  c.conv_kernel = r.i({"mamba_d_conv", "conv_kernel"}, false, 4);
  c.ssm_chunk = r.i({"mamba_chunk_size", "chunk_size"}, false, 256);
  c.mamba_conv_bias = r.b(nemotron ? "mamba_conv_bias" : "use_conv_bias", true);
  c.mamba_proj_bias = r.b(nemotron ? "mamba_proj_bias" : "use_bias", false);
  check_mamba2_mixer(r, c);
}

// Mamba-2 (mamba2: state-spaces/mamba2, Mamba-Codestral): every layer an RMSNorm and a Mamba-2
// mixer (ModelConfig::block_pattern), then norm_f and the head.
void read_mamba2(const Reader& r, ModelConfig& c) {
  c.layers = r.i({"num_hidden_layers"}, true);
  c.hidden = r.i({"hidden_size"}, true);
  c.vocab = r.i({"vocab_size"}, true);
  c.layer_norm_eps = r.f({"layer_norm_epsilon", "rms_norm_eps"}, 1e-5);
  c.tie_embeddings = r.b("tie_word_embeddings", false);
  c.dropout = c.attn_dropout = 0.0f;
  read_mamba2_mixer(r, c, false);
  c.heads = c.kv_heads = c.mamba_heads;  // no attention
  c.head_dim = c.mamba_head_dim;
  c.block_pattern = std::string(static_cast<size_t>(std::clamp<int64_t>(c.layers, 0, kMaxLayers)), 'M');
}

// Granite 4.0-H (granitemoehybrid): Granite's scales and the usual two-block layers, whose
// token mixer is a Mamba-2 mixer where layer_types says "mamba" (the mamba_* fields) and
// attention elsewhere (rotary only when position_embedding_type is "rope"); the MLP a
// top-k mixture of num_local_experts experts of intermediate_size beside an always-on shared
// SwiGLU of shared_intermediate_size, or (no experts) that shared MLP alone.
void read_granite_hybrid(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  read_granite_scales(r, c);
  c.no_positions = r.s({"position_embedding_type"}, "") != "rope";  // HF rotates only under "rope"
  const int64_t shared = r.i({"shared_intermediate_size"}, false, 0);
  c.experts = r.i({"num_local_experts"}, false, 0);
  if (c.experts > 0) {
    c.expert_ffn = c.ffn;
    c.experts_per_token = r.i({"num_experts_per_tok"}, false, 2);
    c.sparse_step = 1;
    c.shared_expert_ffn = shared;
    c.shared_expert_gate = false;
    check_experts(r, c);
  } else if (shared > 0) {
    c.ffn = shared;
  }
  c.mamba_heads = r.i({"mamba_n_heads"}, false, 128);
  // mamba_d_head "auto" (the config class's default): mamba_expand x hidden over the heads.
  const auto d_head = r.j.find("mamba_d_head");
  if (d_head != r.j.end() && d_head->is_string() && d_head->get<std::string>() == "auto")
    c.mamba_head_dim = c.mamba_heads > 0 ? r.i({"mamba_expand"}, false, 2) * c.hidden / c.mamba_heads : 0;
  else
    c.mamba_head_dim = r.i({"mamba_d_head"}, false, 64);
  c.ssm_state = r.i({"mamba_d_state"}, false, 256);
  c.ssm_groups = r.i({"mamba_n_groups"}, false, 1);
  c.conv_kernel = r.i({"mamba_d_conv"}, false, 4);
  c.ssm_chunk = r.i({"mamba_chunk_size"}, false, 256);
  c.mamba_conv_bias = r.b("mamba_conv_bias", true);
  c.mamba_proj_bias = r.b("mamba_proj_bias", false);
  check_mamba2_mixer(r, c);
  c.mamba_layers = layers_of_type(r, c, "mamba");
}

// Nemotron-H (nemotron_h): hybrid_override_pattern gives each layer one block, 'M' a Mamba-2
// mixer, '*' attention (grouped-query, without positions), '-' an MLP (up, squared ReLU, down).
void read_nemotron_h(const Reader& r, ModelConfig& c) {
  c.layers = r.i({"num_hidden_layers"}, true);
  c.hidden = r.i({"hidden_size"}, true);
  c.vocab = r.i({"vocab_size"}, true);
  c.heads = r.i({"num_attention_heads"}, true);
  c.kv_heads = r.i({"num_key_value_heads"}, false, c.heads);
  c.head_dim = r.i({"head_dim", "attention_head_dim"}, false, 0);
  c.ffn = r.i({"intermediate_size"}, true);
  c.activation = r.s({"mlp_hidden_act"}, "relu2");
  c.mlp_bias = r.b("mlp_bias", false);
  c.qkv_bias = c.o_bias = r.b("attention_bias", false);
  c.layer_norm_eps = r.f({"layer_norm_epsilon", "rms_norm_eps"}, 1e-5);
  c.tie_embeddings = r.b("tie_word_embeddings", false);
  c.max_positions = r.i({"max_position_embeddings"}, false, 4096);
  c.dropout = c.attn_dropout = 0.0f;
  check_kv_heads(r, c, "num_key_value_heads");
  read_mamba2_mixer(r, c, true);
  c.block_pattern = r.s({"hybrid_override_pattern"}, "");
  if (static_cast<int64_t>(c.block_pattern.size()) != c.layers)
    throw InputError(r.path + ": hybrid_override_pattern must give one block per layer (" + std::to_string(c.layers) + ")");
  if (c.block_pattern.find_first_not_of("M*-") != std::string::npos)
    throw InputError(r.path + ": hybrid_override_pattern must list M (Mamba-2), * (attention) or - (MLP) blocks; "
                              "E (mixture of experts) is not supported");
}

// Qwen3-Next (qwen3_next): three layers in four (layer_types "linear_attention", or all but
// every full_attention_interval-th) mix tokens with a gated DeltaNet (ModelConfig::delta_layers),
// the others with gated attention (an output gate per head from q_proj; per-head q / k norms;
// rotary on partial_rotary_factor of each head); every MLP a top-k mixture with a gated shared
// expert, as Qwen2-MoE's.
void read_qwen3_next(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  c.qk_norm = c.attn_output_gate = true;
  c.rotary_fraction = r.f({"partial_rotary_factor"}, 0.25);
  check_rotary_fraction(r, c);
  read_qwen_experts(r, c, true);
  c.shared_expert_ffn = r.i({"shared_expert_intermediate_size"}, false, 0);
  c.delta_key_heads = r.i({"linear_num_key_heads"}, false, 16);
  c.delta_value_heads = r.i({"linear_num_value_heads"}, false, 32);
  c.delta_key_dim = r.i({"linear_key_head_dim"}, false, 128);
  c.delta_value_dim = r.i({"linear_value_head_dim"}, false, 128);
  c.conv_kernel = r.i({"linear_conv_kernel_dim"}, false, 4);
  if (c.delta_key_heads <= 0 || c.delta_value_heads <= 0 || c.delta_key_dim <= 0 || c.delta_value_dim <= 0 ||
      c.delta_value_heads % c.delta_key_heads != 0 || c.conv_kernel < 2)
    throw InputError(r.path + ": linear-attention heads and sizes must be positive, the value heads a multiple of the key "
                              "heads and linear_conv_kernel_dim at least 2");
  bool listed = false;
  c.delta_layers = layers_of_type(r, c, "linear_attention", &listed);
  if (!listed) {
    const int64_t every = std::max<int64_t>(1, r.i({"full_attention_interval"}, false, 4));
    for (int64_t l = 0; l < c.layers; ++l) c.delta_layers[static_cast<size_t>(l)] = (l + 1) % every != 0;
  }
}

// `j` with layer_types spelled out from a pattern of L (sliding-window) and G (global) layers
// repeated over num_hidden_layers, where it lists none and sets a positive sliding_window.
json with_layer_pattern(json j, const std::string& pattern) {
  const auto window = j.find("sliding_window");
  const bool windowed = window != j.end() && window->is_number_integer() && window->get<int64_t>() > 0;
  if (j.contains("layer_types") || !windowed || !j.contains("num_hidden_layers") || !j["num_hidden_layers"].is_number_integer())
    return j;
  const int64_t layers = std::clamp<int64_t>(j["num_hidden_layers"].get<int64_t>(), 0, kMaxLayers);
  json types = json::array();
  for (int64_t l = 0; l < layers; ++l)
    types.push_back(pattern[static_cast<size_t>(l) % pattern.size()] == 'L' ? "sliding_attention" : "full_attention");
  j["layer_types"] = types;
  return j;
}

// EXAONE 4.0 (exaone4): OLMo 2's norms after the attention and the MLP (not before), an RMSNorm
// over each query and key head, and with a sliding window three local layers to one global
// (sliding_window_pattern: a count, or a string of L and G repeated over the layers; or
// layer_types) whose global layers use no positions; without one every layer is global and
// rotary.
void read_exaone4(const Reader& outer, ModelConfig& c) {
  json j = outer.j;
  const auto pattern = j.find("sliding_window_pattern");
  std::string p = "LLLG";
  if (pattern != j.end() && pattern->is_string()) p = pattern->get<std::string>();
  if (pattern != j.end() && pattern->is_number_integer() && pattern->get<int64_t>() > 0)
    p = std::string(static_cast<size_t>(std::min<int64_t>(pattern->get<int64_t>(), kMaxLayers) - 1), 'L') + "G";
  if (p.empty() || p.find_first_not_of("LG") != std::string::npos)
    throw InputError(outer.path + ": sliding_window_pattern must be a positive count or a string of L and G");
  j = with_layer_pattern(j, p);
  j.erase("sliding_window_pattern");
  const Reader r{j, outer.path};
  read_llama(r, c);
  c.layer_norm_eps = r.f({"rms_norm_eps"}, 1e-5);
  c.post_norm = c.qk_norm = true;
  c.rotary_sliding_only = c.sliding_window > 0;
}

// GLM-4 (glm: GLM-4-9B as transformers ports it): a Llama-style decoder with biased q/k/v
// (attention_bias, on by default), one gate_up_proj GEMM (Phi-3's) and rotary on half of each
// head (partial_rotary_factor; pairs interleaved, the same passes).
void read_glm(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  c.qkv_bias = r.b("attention_bias", true);
  c.fused_gate_up = true;
  c.rotary_fraction = r.f({"partial_rotary_factor"}, 0.5);
  check_rotary_fraction(r, c);
}

// GLM-4 (glm4: GLM-4-0414, GLM-Z1): GLM's layers with RMSNorms around the attention and the
// MLP as well as before them (post_self_attn_layernorm, post_mlp_layernorm: Gemma 2's sandwich).
void read_glm4(const Reader& r, ModelConfig& c) {
  read_glm(r, c);
  c.sandwich_norm = true;
}

// OLMo 3 (olmo3): OLMo 2's layers, three sliding-window layers to one global (layer_types, or
// that pattern where a sliding_window is set), rotary on both.
void read_olmo3(const Reader& outer, ModelConfig& c) {
  const Reader r{with_layer_pattern(outer.j, "LLLG"), outer.path};
  read_olmo2(r, c);
}

// Seed-OSS (ByteDance): a Llama-style decoder with biased q, k and v projections
// (attention_bias, on by default), its output projection biased where attention_out_bias says.
void read_seed_oss(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  c.qkv_bias = r.b("attention_bias", true);
  c.o_bias = r.b("attention_out_bias", false);
}

// Arcee (AFM): a Llama-style decoder whose MLP is not gated: up_proj, ReLU squared, down_proj.
void read_arcee(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  c.activation = r.s({"hidden_act"}, "relu2");
  c.dense_mlp = true;
  c.mlp_bias = r.b("mlp_bias", false);
}

// ERNIE 4.5 (ernie4_5, the dense models): a Llama-style decoder whose projections (q, k, v, o
// and the MLP's) carry biases where use_bias says, its head tied by default; its rotary pairs
// interleaved dims, the same passes.
void read_ernie4_5(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  c.layer_norm_eps = r.f({"rms_norm_eps"}, 1e-5);
  c.qkv_bias = c.o_bias = c.gated_mlp_bias = r.b("use_bias", false);
  c.tie_embeddings = r.b("tie_word_embeddings", true);
}

// StableLM (StableLM 2, StableLM-3B-4E1T, StableCode): LayerNorms with bias, rotary on
// partial_rotary_factor of each head, q, k and v biased where use_qkv_bias, a SwiGLU MLP; the
// attention and the MLP side by side on one norm where use_parallel_residual; each query and
// key head LayerNorm-ed where qk_layernorm.
void read_stablelm(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  c.layer_norm_eps = r.f({"layer_norm_eps"}, 1e-5);
  c.layer_norm = true;
  c.rotary_fraction = r.f({"partial_rotary_factor"}, 0.25);
  check_rotary_fraction(r, c);
  c.qkv_bias = r.b("use_qkv_bias", false);
  c.qk_norm = r.b("qk_layernorm", false);
  c.parallel_block = r.b("use_parallel_residual", false) ? 1 : 0;
  c.dropout = static_cast<float>(r.f({"hidden_dropout"}, 0.0));
}

// Llama 4 (llama4_text, the language model of a llama4 config): every
// interleave_moe_layer_step-th layer (or those moe_layers lists) top-k of num_local_experts
// SwiGLU experts of intermediate_size beside an always-on shared expert of the same size, the
// rest dense MLPs of intermediate_size_mlp; every no_rope_layer_interval-th layer (or those
// no_rope_layers marks 0) global attention without positions, its queries scaled by
// attn_temperature_tuning, the others rotary and chunked (attention_chunk_size; null: none),
// their query and key heads RMS-normalised without a weight when use_qk_norm. The router's
// sigmoid of the top-k logits costs as the MoE operator's routing. Chunked attention is built
// as a sliding window of the chunk size: the same keys for prompts up to one chunk, at most
// twice the chunk's keys beyond, the same cache bound.
void read_llama4(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  c.layer_norm_eps = r.f({"rms_norm_eps"}, 1e-5);
  c.expert_ffn = c.ffn;
  c.ffn = r.i({"intermediate_size_mlp"}, false, 16384);
  c.experts = r.i({"num_local_experts"}, true);
  c.experts_per_token = r.i({"num_experts_per_tok"}, false, 1);
  c.normalize_routing = false;
  c.shared_expert_ffn = c.expert_ffn;
  c.shared_expert_gate = false;
  c.sparse_step = r.i({"interleave_moe_layer_step"}, false, 1);
  if (auto it = r.j.find("moe_layers"); it != r.j.end() && it->is_array()) {
    std::vector<bool> moe(static_cast<size_t>(c.layers), false);
    for (const auto& v : *it) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c.layers)
        throw InputError(r.path + ": moe_layers must list layer indices below num_hidden_layers");
      moe[static_cast<size_t>(v.get<int64_t>())] = true;
    }
    c.sparse_step = 1;
    for (int64_t l = 0; l < c.layers; ++l)
      if (!moe[static_cast<size_t>(l)]) c.dense_layers.push_back(l);
  }
  check_experts(r, c);
  const auto chunk = r.j.find("attention_chunk_size");
  const bool chunked = chunk == r.j.end() || !chunk->is_null();
  read_rotary_layers(r, c, chunked ? r.i({"attention_chunk_size"}, false, 8192) : 0);
  c.qk_norm = r.b("use_qk_norm", true);
  c.qk_norm_rotary_only = c.qk_norm_unweighted = true;
  const auto tuning = r.j.find("attn_temperature_tuning");  // a flag (HF), a number in Meta's originals
  c.attn_temperature_tuning = tuning == r.j.end() || tuning->is_null() ||
                              (tuning->is_boolean() ? tuning->get<bool>() : tuning->is_number() && tuning->get<double>() != 0);
  c.attn_floor_scale = r.f({"floor_scale"}, 8192);
  c.attn_scale = r.f({"attn_scale"}, 0.1);
  if (!(c.attn_floor_scale > 0)) throw InputError(r.path + ": floor_scale must be positive");
}

// GLM-4.5 and GLM-4.6 (glm4_moe): DeepSeek-V3's mixture (its experts, shared experts, dense
// first layers and draft layers, read as above) under grouped-query attention: biased q, k
// and v projections (attention_bias), RMSNorm on each query and key head when use_qk_norm,
// rotary on partial_rotary_factor of each head (half by default, as Glm4MoeConfig has it).
void read_glm4_moe(const Reader& r, ModelConfig& c) {
  read_llama(r, c);
  c.layer_norm_eps = r.f({"rms_norm_eps"}, 1e-5);
  c.qk_norm = r.b("use_qk_norm", false);
  c.rotary_fraction = r.f({"partial_rotary_factor"}, 0.5);
  check_rotary_fraction(r, c);
  read_deepseek_experts(r, c);
}

// CLIPVisionConfig's or SiglipVisionConfig's defaults (transformers' config classes).
json vision_defaults(bool siglip) {
  return {{"hidden_size", 768}, {"intermediate_size", 3072}, {"num_hidden_layers", 12}, {"num_attention_heads", 12},
          {"image_size", 224}, {"patch_size", siglip ? 16 : 32}};
}

// `given` (an object, or null / absent: the defaults alone) over `defaults`; InputError naming
// `what` when it is something else.
json over_defaults(json defaults, const json* given, const std::string& what) {
  if (given == nullptr || given->is_null()) return defaults;
  if (!given->is_object()) throw InputError(what + " must be an object");
  for (auto it = given->begin(); it != given->end(); ++it) defaults[it.key()] = it.value();
  return defaults;
}

// A CLIP or SigLIP vision transformer's sizes from its config (`r`, over vision_defaults); returns
// the patches an image is cut into.
int64_t read_tower_fields(const Reader& r, ModelConfig::VisionTower& t, bool siglip) {
  t.kind = siglip ? ModelConfig::VisionTower::Kind::siglip : ModelConfig::VisionTower::Kind::clip;
  t.layers = r.i({"num_hidden_layers"}, true);
  t.hidden = r.i({"hidden_size"}, true);
  t.heads = r.i({"num_attention_heads"}, true);
  t.ffn = r.i({"intermediate_size"}, true);
  t.image_size = r.i({"image_size"}, true);
  t.patch_size = r.i({"patch_size"}, true);
  t.channels = r.i({"num_channels"}, false, 3);
  t.activation = r.s({"hidden_act"}, siglip ? "gelu_pytorch_tanh" : "quick_gelu");
  t.layer_norm_eps = r.f({"layer_norm_eps"}, siglip ? 1e-6 : 1e-5);
  if (t.layers <= 0 || t.layers > kMaxLayers || t.hidden <= 0 || t.heads <= 0 || t.hidden % t.heads != 0 || t.ffn <= 0)
    throw InputError(r.path + ": layers, hidden size (a multiple of the heads) and FFN size expected");
  t.feature_layer = t.layers;
  return builder::image_patches(t.image_size, t.patch_size, t.channels, r.path);
}

// CLIPVisionModel / CLIPVisionModelWithProjection and SiglipVisionModel: the vision tower alone,
// its sizes copied to the model's own fields (an image encoder: --batch binds it).
void read_vision_model(const Reader& given, ModelConfig& c, bool siglip) {
  const json j = over_defaults(vision_defaults(siglip), &given.j, given.path);
  const Reader r{j, given.path};
  const int64_t patches = read_tower_fields(r, c.vision, siglip);
  const ModelConfig::VisionTower& t = c.vision;
  c.layers = t.layers;
  c.hidden = t.hidden;
  c.heads = t.heads;
  c.ffn = t.ffn;
  c.activation = t.activation;
  c.layer_norm_eps = t.layer_norm_eps;
  c.image_size = t.image_size;
  c.patch_size = t.patch_size;
  c.num_channels = t.channels;
  c.max_positions = patches + (siglip ? 0 : 1);
  c.dropout = c.attn_dropout = 0;
  if (siglip) {
    c.head = r.b("vision_use_head", true) ? "map" : "none";
  } else {
    c.head = given.architecture() == "CLIPVisionModelWithProjection" ? "projection" : "pooler";
    c.projection_dim = r.i({"projection_dim"}, false, 512);
  }
}
void read_clip_vision(const Reader& r, ModelConfig& c) { read_vision_model(r, c, false); }
void read_siglip_vision(const Reader& r, ModelConfig& c) { read_vision_model(r, c, true); }

// CLIPTextConfig's or SiglipTextConfig's defaults.
json text_defaults(bool siglip) {
  return siglip ? json{{"vocab_size", 32000}, {"hidden_size", 768}, {"intermediate_size", 3072}, {"num_hidden_layers", 12},
                       {"num_attention_heads", 12}, {"max_position_embeddings", 64}}
                : json{{"vocab_size", 49408}, {"hidden_size", 512}, {"intermediate_size", 2048}, {"num_hidden_layers", 12},
                       {"num_attention_heads", 8}, {"max_position_embeddings", 77}};
}

// A CLIP or SigLIP text transformer's sizes into the model's own fields (`t`, over text_defaults).
void read_text_fields(const Reader& t, ModelConfig& c, bool siglip) {
  c.layers = t.i({"num_hidden_layers"}, true);
  c.hidden = t.i({"hidden_size"}, true);
  c.heads = t.i({"num_attention_heads"}, true);
  c.ffn = t.i({"intermediate_size"}, true);
  c.vocab = t.i({"vocab_size"}, true);
  c.max_positions = t.i({"max_position_embeddings"}, true);
  c.learned_positions = true;
  c.activation = t.s({"hidden_act"}, siglip ? "gelu_pytorch_tanh" : "quick_gelu");
  c.layer_norm_eps = t.f({"layer_norm_eps"}, siglip ? 1e-6 : 1e-5);
  c.dropout = c.attn_dropout = 0;
  if (c.max_positions <= 0) throw InputError(t.path + ": max_position_embeddings must be positive");
}

// CLIPTextModel / CLIPTextModelWithProjection (Stable Diffusion's text encoders) and
// SiglipTextModel: the text tower alone, pooled (and projected).
void read_text_model(const Reader& given, ModelConfig& c, bool siglip) {
  const json j = over_defaults(text_defaults(siglip), &given.j, given.path);
  const Reader t{j, given.path};
  read_text_fields(t, c, siglip);
  c.projection_dim = t.i({siglip ? "projection_size" : "projection_dim"}, false, siglip ? c.hidden : 512);
  if (c.projection_dim <= 0) throw InputError(given.path + ": the projection size must be positive");
  c.head = !siglip && given.architecture() == "CLIPTextModelWithProjection" ? "projection" : "pooler";
}
void read_clip_text(const Reader& r, ModelConfig& c) { read_text_model(r, c, false); }
void read_siglip_text(const Reader& r, ModelConfig& c) { read_text_model(r, c, true); }

// CLIPModel and SiglipModel: text_config (CLIPTextConfig's or SiglipTextConfig's defaults) in
// the model's own fields, vision_config in `vision`, both pooled and projected to projection_dim
// (CLIP: the outer config's; SigLIP: the text head's projection_size, the text hidden size by
// default, which SigLIP's attention-pooling head on the image side matches).
void read_dual_encoder(const Reader& outer, ModelConfig& c, bool siglip) {
  auto tc = outer.j.find("text_config"), vc = outer.j.find("vision_config");
  const json text = over_defaults(text_defaults(siglip), tc == outer.j.end() ? nullptr : &*tc,
                                  outer.path + ": field 'text_config'");
  const json vision = over_defaults(vision_defaults(siglip), vc == outer.j.end() ? nullptr : &*vc,
                                    outer.path + ": field 'vision_config'");
  const std::string text_path = outer.path + " text_config", vision_path = outer.path + " vision_config";
  const Reader t{text, text_path};
  read_text_fields(t, c, siglip);
  read_tower_fields(Reader{vision, vision_path}, c.vision, siglip);
  c.projection_dim = siglip ? t.i({"projection_size"}, false, c.hidden) : outer.i({"projection_dim"}, false, 512);
  if (c.projection_dim <= 0) throw InputError(outer.path + ": the projection size must be positive");
  if (siglip && c.projection_dim != c.vision.hidden)
    throw InputError(outer.path + ": SigLIP's text projection_size (" + std::to_string(c.projection_dim) +
                     ") must equal the vision hidden size (" + std::to_string(c.vision.hidden) + ")");
  c.head = "contrastive";
}
void read_clip(const Reader& r, ModelConfig& c) { read_dual_encoder(r, c, false); }
void read_siglip(const Reader& r, ModelConfig& c) { read_dual_encoder(r, c, true); }

struct Family {
  std::function<void(const Reader&, ModelConfig&)> read;
  std::function<LoadedModel(const ModelConfig&)> build;
  // The decoder with a KV cache step or last-position logits (BuildOptions); empty for
  // encoder models.
  std::function<LoadedModel(const ModelConfig&, const BuildOptions&)> build_step = nullptr;
};

LoadedModel llama(const ModelConfig& c) { return builder::build_llama(c, BuildOptions{}); }

// GPT-2's KV-cache step and last-position prefill on the Llama builder: GPTBigCode's block
// with every head in the cache. The same GEMMs (one biased c_attn, c_proj, c_fc, the second
// c_proj), LayerNorms, learned positions and tied head as build_gpt2's forward.
LoadedModel gpt2_step(const ModelConfig& gpt2, const BuildOptions& o) {
  ModelConfig c = gpt2;
  c.kv_heads = c.heads;
  c.qkv_bias = c.o_bias = c.mlp_bias = true;
  c.layer_norm = c.dense_mlp = c.fused_qkv_blocks = true;
  return builder::build_llama(c, o);
}

// OPT's step: biased q, k and v projections of their own, a biased ReLU MLP (fc1, fc2),
// LayerNorms before each block and after the last, learned positions (OPT's table has two rows
// more than its positions: the lookup is offset by 2), the head tied. OPT-350m's layout
// (LayerNorms after the blocks, project_in / project_out around a narrower embedding) is built
// for forward passes only.
LoadedModel opt_step(const ModelConfig& opt, const BuildOptions& o) {
  if (!opt.pre_norm || (opt.embed_dim != 0 && opt.embed_dim != opt.hidden))
    throw InputError(opt.source + ": OPT with do_layer_norm_before false or a word_embed_proj_dim other than the "
                     "hidden size (OPT-350m) has no KV-cache decoder step; --seq predicts its forward pass");
  ModelConfig c = opt;
  c.kv_heads = c.heads;
  c.qkv_bias = c.o_bias = c.mlp_bias = true;
  c.layer_norm = c.dense_mlp = true;
  c.position_offset = 2;
  return builder::build_llama(c, o);
}

const std::map<std::string, Family>& families() {
  static const std::map<std::string, Family> t = {
      {"gpt2", {read_gpt2, builder::build_gpt2, gpt2_step}},
      {"bert", {read_bert, builder::build_bert}},
      {"roberta", {read_bert, builder::build_bert}},
      {"xlm-roberta", {read_bert, builder::build_bert}},
      {"camembert", {read_bert, builder::build_bert}},
      {"distilbert", {read_distilbert, builder::build_distilbert}},
      {"electra", {read_electra, builder::build_electra}},
      {"albert", {read_albert, builder::build_albert}},
      {"mpnet", {read_mpnet, builder::build_mpnet}},
      {"modernbert", {read_modernbert, builder::build_modernbert}},
      {"deberta", {read_deberta, builder::build_deberta_v2}},
      {"deberta-v2", {read_deberta_v2, builder::build_deberta_v2}},
      {"vit", {read_vit, builder::build_vit}},
      {"deit", {read_deit, builder::build_vit}},
      {"dinov2", {read_dinov2, builder::build_vit}},
      {"clip", {read_clip, builder::build_clip}},
      {"clip_vision_model", {read_clip_vision, builder::build_clip}},
      {"clip_text_model", {read_clip_text, builder::build_clip_text}},
      {"siglip_text_model", {read_siglip_text, builder::build_clip_text}},
      {"siglip", {read_siglip, builder::build_clip}},
      {"siglip_vision_model", {read_siglip_vision, builder::build_clip}},
      {"opt", {read_opt, builder::build_opt, opt_step}},
      {"switch_transformers", {read_switch, builder::build_switch, builder::build_t5_generation}},
      {"t5", {read_t5, builder::build_switch, builder::build_t5_generation}},
      {"mt5", {read_t5, builder::build_switch, builder::build_t5_generation}},
      {"whisper", {read_whisper, builder::build_whisper, builder::build_whisper_generation}},
      {"bart", {read_bart, builder::build_bart, builder::build_bart_generation}},
      {"marian", {read_bart, builder::build_bart, builder::build_bart_generation}},
      {"mbart", {read_bart, builder::build_bart, builder::build_bart_generation}},
      {"pegasus", {read_bart, builder::build_bart, builder::build_bart_generation}},
      {"m2m_100", {read_bart, builder::build_bart, builder::build_bart_generation}},
      {"llama", {read_llama, llama, builder::build_llama}},
      {"mistral", {read_llama, llama, builder::build_llama}},
      {"mixtral", {read_mixtral, llama, builder::build_llama}},
      {"qwen2_moe", {read_qwen2_moe, llama, builder::build_llama}},
      {"qwen3", {read_qwen3, llama, builder::build_llama}},
      {"qwen3_moe", {read_qwen3_moe, llama, builder::build_llama}},
      {"qwen3_vl_text", {read_qwen3, llama, builder::build_llama}},
      {"qwen3_vl_moe_text", {read_qwen3_moe, llama, builder::build_llama}},
      {"qwen2", {read_llama, llama, builder::build_llama}},
      {"qwen2_vl", {read_qwen2_vl, llama, builder::build_llama}},
      {"qwen2_5_vl", {read_qwen2_vl, llama, builder::build_llama}},
      {"phi", {read_phi, llama, builder::build_llama}},
      {"gpt_neox", {read_gpt_neox, llama, builder::build_llama}},
      {"phi3", {read_phi3, llama, builder::build_llama}},
      {"gptj", {read_gptj, llama, builder::build_llama}},
      {"falcon", {read_falcon, llama, builder::build_llama}},
      {"RefinedWeb", {read_falcon, llama, builder::build_llama}},
      {"RefinedWebModel", {read_falcon, llama, builder::build_llama}},
      {"starcoder2", {read_starcoder2, llama, builder::build_llama}},
      {"bloom", {read_bloom, llama, builder::build_llama}},
      {"gpt_bigcode", {read_gpt_bigcode, llama, builder::build_llama}},
      {"granite", {read_granite, llama, builder::build_llama}},
      {"olmoe", {read_olmoe, llama, builder::build_llama}},
      {"phimoe", {read_phimoe, llama, builder::build_llama}},
      {"internlm2", {read_internlm2, llama, builder::build_llama}},
      {"olmo2", {read_olmo2, llama, builder::build_llama}},
      {"nemotron", {read_nemotron, llama, builder::build_llama}},
      {"granitemoe", {read_granite, llama, builder::build_llama}},
      {"cohere", {read_cohere, llama, builder::build_llama}},
      {"cohere2", {read_cohere2, llama, builder::build_llama}},
      {"mpt", {read_mpt, llama, builder::build_llama}},
      {"gpt_oss", {read_gpt_oss, llama, builder::build_llama}},
      {"deepseek_v3", {read_deepseek_v3, llama, builder::build_llama}},
      {"deepseek_v2", {read_deepseek_v3, llama, builder::build_llama}},
      {"kimi_k2", {read_deepseek_v3, llama, builder::build_llama}},
      {"glm4_moe", {read_glm4_moe, llama, builder::build_llama}},
      {"llama4_text", {read_llama4, llama, builder::build_llama}},
      {"smollm3", {read_smollm3, llama, builder::build_llama}},
      {"glm4", {read_glm4, llama, builder::build_llama}},
      {"glm", {read_glm, llama, builder::build_llama}},
      {"olmo3", {read_olmo3, llama, builder::build_llama}},
      {"seed_oss", {read_seed_oss, llama, builder::build_llama}},
      {"arcee", {read_arcee, llama, builder::build_llama}},
      {"ernie4_5", {read_ernie4_5, llama, builder::build_llama}},
      {"stablelm", {read_stablelm, llama, builder::build_llama}},
      {"exaone4", {read_exaone4, llama, builder::build_llama}},
      {"mamba2", {read_mamba2, llama, builder::build_llama}},
      {"nemotron_h", {read_nemotron_h, llama, builder::build_llama}},
      {"qwen3_next", {read_qwen3_next, llama, builder::build_llama}},
      {"granitemoehybrid", {read_granite_hybrid, llama, builder::build_llama}},
      {"gemma", {read_gemma, llama, builder::build_llama}},
      {"gemma2", {read_gemma, llama, builder::build_llama}},
      {"gemma3_text", {read_gemma3, llama, builder::build_llama}},
      {"gemma3", {read_gemma3, llama, builder::build_llama}},
  };
  return t;
}

std::string supported_list() {
  std::string s;
  for (const auto& [k, v] : families()) s += (s.empty() ? "" : ", ") + k;
  return s;
}

// quantization_config of GPTQ and AWQ checkpoints (transformers' GPTQConfig, AwqConfig):
// bits, group_size (-1: per output row), sym / zero_point, modules_to_not_convert. A
// mixture's experts take the same bits as a QMoE. Other methods are only named
// (config_quantization_note); gpt-oss reads its own MXFP4 config (read_gpt_oss).
void read_quantization(const Reader& outer, ModelConfig& c) {
  auto it = outer.j.find("quantization_config");
  if (it == outer.j.end() || !it->is_object() || c.expert_weight_bits > 0) return;
  const Reader r{*it, outer.path};
  c.quant_method = r.s({"quant_method"}, "");
  if (c.quant_method != "gptq" && c.quant_method != "awq") return;
  c.weight_bits = r.i({"bits", "w_bit"}, true);
  const auto group = r.j.find(r.j.contains("group_size") ? "group_size" : "q_group_size");
  if (group != r.j.end() && group->is_number_integer() && group->get<int64_t>() == -1) c.weight_group = 0;
  else c.weight_group = r.i({"group_size", "q_group_size"}, false, 128);
  c.weight_zero_points = c.quant_method == "awq" ? r.b("zero_point", true) : !r.b("sym", true);
  if (c.weight_bits < 2 || c.weight_bits > 8)
    throw InputError(outer.path + ": quantization_config bits must be between 2 and 8");
  if (c.weight_group != 0 && (c.weight_group < 16 || (c.weight_group & (c.weight_group - 1)) != 0))
    throw InputError(outer.path + ": quantization_config group_size must be -1 or a power of two of at least 16");
  if (auto m = it->find("modules_to_not_convert"); m != it->end() && m->is_array())
    for (const auto& v : *m)
      if (v.is_string()) c.unquantized.push_back(v.get<std::string>());
  if (c.experts > 0) {
    // The routers stay in the model's dtype (AutoGPTQ and AutoAWQ leave them unconverted).
    for (const char* router : {"gate", "shared_expert_gate"}) c.unquantized.push_back(router);
    c.expert_weight_bits = c.weight_bits;
    c.expert_block = c.weight_group > 0 ? c.weight_group : 128;
  }
}

}  // namespace

namespace {

// A multimodal config's language model (LLaVA, Mistral 3, PaliGemma, ...): its text_config when
// that names a family built here, with the defaults of the HF config class where the nested
// config leaves them out (save_pretrained writes only the fields that differ from them) and
// the outer config's dtype and quantization. Nothing otherwise.
std::optional<json> language_model_config(const json& j) {
  auto t = j.find("text_config");
  if (t == j.end() || !t->is_object()) return std::nullopt;
  auto mt = t->find("model_type");
  if (mt == t->end() || !mt->is_string() || !families().count(mt->get<std::string>())) return std::nullopt;
  const std::string type = mt->get<std::string>();
  json text = json::object();
  if (type == "llama")  // LlamaConfig's defaults (Llama 2 7B)
    text = {{"hidden_size", 4096}, {"intermediate_size", 11008}, {"num_hidden_layers", 32}, {"num_attention_heads", 32},
            {"vocab_size", 32000}};
  else if (type == "mistral")  // MistralConfig's defaults (Mistral 7B)
    text = {{"hidden_size", 4096}, {"intermediate_size", 14336}, {"num_hidden_layers", 32}, {"num_attention_heads", 32},
            {"num_key_value_heads", 8}, {"vocab_size", 32000}, {"sliding_window", 4096}};
  for (auto it = t->begin(); it != t->end(); ++it) text[it.key()] = it.value();
  for (const char* k : {"torch_dtype", "dtype", "quantization_config"})
    if (!text.contains(k) && j.contains(k)) text[k] = j[k];
  return text;
}

// LLaVA-NeXT's grid and unpadded feature map for an image of `height` x `width` pixels
// (transformers' select_best_resolution, then LlavaNextProcessor._get_unpadded_features).
void set_grid_image(ModelConfig::VisionTower& t, int64_t height, int64_t width) {
  int64_t best_h = 0, best_w = 0;
  double best_kept = 0, best_wasted = std::numeric_limits<double>::infinity();
  for (const auto& [h, w] : t.pinpoints) {
    const double scale = std::min(double(w) / double(width), double(h) / double(height));
    const double kept = std::min(std::floor(double(width) * scale) * std::floor(double(height) * scale), double(width) * double(height));
    const double wasted = double(w) * double(h) - kept;
    if (kept > best_kept || (kept == best_kept && wasted < best_wasted)) {
      best_kept = kept;
      best_wasted = wasted;
      best_h = h;
      best_w = w;
    }
  }
  t.grid_rows = best_h / t.image_size;
  t.grid_cols = best_w / t.image_size;
  const int64_t side = t.image_size / t.patch_size;
  int64_t rows = side * t.grid_rows, cols = side * t.grid_cols;
  if (double(width) / double(height) > double(cols) / double(rows)) {  // wider: rows padded
    const int64_t fit = static_cast<int64_t>(std::round(double(height) * (double(cols) / double(width)) * 1e7) / 1e7);
    rows -= 2 * ((rows - fit) / 2);
  } else {
    const int64_t fit = static_cast<int64_t>(std::round(double(width) * (double(rows) / double(height)) * 1e7) / 1e7);
    cols -= 2 * ((cols - fit) / 2);
  }
  t.feature_rows = rows;
  t.feature_cols = cols;
}

// LLaVA-NeXT's image_grid_pinpoints (LlavaNextConfig's default: 336x672, 672x336, 672x672,
// 1008x336, 336x1008), and the grid and feature map of a square image as large as the largest
// of them (set_grid_image): the square pinpoint, 2 x 2 crops of 336, by default. Pinpoints that are not
// multiples of the tower's image size are an input error (the crops would not tile them).
void read_grid_pinpoints(const json& j, const std::string& path, ModelConfig::VisionTower& t) {
  if (t.keep_class_token)  // pack_image_features tiles side x side features per crop
    throw InputError(path + ": LLaVA-NeXT takes vision_feature_select_strategy default (its crops tile without the class "
                            "token)");
  json pins = json::array({{336, 672}, {672, 336}, {672, 672}, {1008, 336}, {336, 1008}});
  auto given = j.find("image_grid_pinpoints");
  if (given != j.end() && !given->is_null()) pins = *given;
  const std::string what = path + ": image_grid_pinpoints";
  if (!pins.is_array() || pins.empty()) throw InputError(what + " must be a list of [height, width]");
  for (const json& p : pins) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || !p[1].is_number_integer())
      throw InputError(what + " must be a list of [height, width]");
    const int64_t h = p[0].get<int64_t>(), w = p[1].get<int64_t>();
    if (h <= 0 || w <= 0 || h % t.image_size != 0 || w % t.image_size != 0 || h / t.image_size > 64 || w / t.image_size > 64)
      throw InputError(what + ": each side a multiple of the tower's image_size (" + std::to_string(t.image_size) +
                       "), at most 64 crops");
  }
  t.pinpoints.clear();
  int64_t side = 0;
  for (const json& p : pins) {
    t.pinpoints.emplace_back(p[0].get<int64_t>(), p[1].get<int64_t>());
    side = std::max({side, t.pinpoints.back().first, t.pinpoints.back().second});
  }
  set_grid_image(t, side, side);  // the default image: a square as large as the largest pinpoint
}

// The vision tower of LLaVA (CLIP's, when one layer's features are taken) and of PaliGemma
// (SigLIP's, without its pooling head): vision_config over CLIPVisionConfig's / SiglipVisionConfig's
// defaults, or the outer config class's own default tower (LLaVA: CLIP ViT-L/14 at 336 pixels;
// PaliGemma: SigLIP So400m/14 at 224). Another tower, several feature layers: not built
// (config_multimodal_note says so).
void read_vision_tower(const json& j, const std::string& path, ModelConfig& lm) {
  const bool gemma3 = lm.language_model_of == "gemma3", siglip = lm.language_model_of == "paligemma" || gemma3;
  auto given = j.find("vision_config");
  json v = given == j.end() || given->is_null()
               ? (siglip ? json{{"hidden_size", 1152}, {"intermediate_size", gemma3 ? 4304 : 4096}, {"num_hidden_layers", 27},
                                {"num_attention_heads", 16}, {"image_size", gemma3 ? 896 : 224}, {"patch_size", 14}}
                         : json{{"hidden_size", 1024}, {"intermediate_size", 4096}, {"num_hidden_layers", 24},
                                {"num_attention_heads", 16}, {"image_size", 336}, {"patch_size", 14}})
               : over_defaults(vision_defaults(siglip), &*given, path + ": field 'vision_config'");
  auto layer = j.find("vision_feature_layer");
  if ((v.contains("model_type") && v["model_type"] != (siglip ? "siglip_vision_model" : "clip_vision_model")) ||
      (layer != j.end() && !layer->is_null() && !layer->is_number_integer()) ||
      (siglip && v.contains("vision_use_head") && v["vision_use_head"] == true))
    return;
  const std::string where = path + " vision_config";
  ModelConfig::VisionTower& t = lm.vision;
  read_tower_fields(Reader{v, where}, t, siglip);
  if (gemma3) {  // Gemma3MultiModalProjector: the patch grid average-pooled to mm_tokens_per_image
    const Reader outer{j, path};
    t.pooled_tokens = outer.i({"mm_tokens_per_image"}, false, 256);
    const int64_t side = t.image_size / t.patch_size, pooled = std::llround(std::sqrt(double(t.pooled_tokens)));
    if (pooled * pooled != t.pooled_tokens || pooled <= 0 || side % pooled != 0)
      throw InputError(path + ": mm_tokens_per_image must be a square whose side divides the " + std::to_string(side) +
                       " patches a side");
  }
  if (siglip) return;  // the last hidden state, every patch (SigLIP has no class token)
  const Reader outer{j, path};
  const int64_t fl = layer == j.end() || layer->is_null() ? -2 : layer->get<int64_t>();
  t.feature_layer = fl < 0 ? t.layers + 1 + fl : fl;
  if (t.feature_layer < 0 || t.feature_layer > t.layers)
    throw InputError(path + ": vision_feature_layer " + std::to_string(fl) + " is not one of the tower's " +
                     std::to_string(t.layers + 1) + " hidden states");
  const std::string strategy = outer.s({"vision_feature_select_strategy"}, "default");
  if (strategy != "default" && strategy != "full")
    throw InputError(path + ": vision_feature_select_strategy must be default or full, got '" + strategy + "'");
  t.keep_class_token = strategy == "full";
  t.projector_activation = outer.s({"projector_hidden_act"}, "gelu");
  if (lm.language_model_of == "llava_next") read_grid_pinpoints(j, path, t);
}

// Llama 4's vision model and projector (Llama4Config): vision_config over Llama 4 Scout's and
// Maverick's tower (34 layers of 1408, 16 heads, an MLP of 5632, tiles of 336 in patches of 14,
// a pixel shuffle of 0.5 into the adapter's 4096; Llama4VisionConfig's own defaults describe no
// released model), at most 16 tiles an image (Llama4ImageProcessor's max_patches). Another
// vision_feature_layer than the last: not built (config_multimodal_note says so).
void read_llama4_vision(const json& j, const std::string& path, ModelConfig& lm) {
  const std::string where = path + " vision_config";
  const Reader v{vision_config(j, path), where};
  if (auto fl = v.j.find("vision_feature_layer");
      fl != v.j.end() && !fl->is_null() && !(fl->is_number_integer() && fl->get<int64_t>() == -1))
    return;
  ModelConfig::VisionTower& t = lm.vision;
  t.kind = ModelConfig::VisionTower::Kind::llama4;
  t.layers = v.i({"num_hidden_layers"}, false, 34);
  t.hidden = v.i({"hidden_size"}, false, 1408);
  t.heads = v.i({"num_attention_heads"}, false, 16);
  t.ffn = v.i({"intermediate_size"}, false, 5632);
  t.channels = v.i({"num_channels"}, false, 3);
  t.image_size = v.i({"image_size"}, false, 336);
  t.patch_size = v.i({"patch_size"}, false, 14);
  t.layer_norm_eps = v.f({"norm_eps"}, 1e-5);
  t.activation = v.s({"hidden_act"}, "gelu");
  const double ratio = v.f({"pixel_shuffle_ratio"}, 0.5);
  t.shuffle = ratio > 0 ? std::llround(1.0 / ratio) : 0;
  t.adapter_dim = v.i({"projector_output_dim"}, false, 4096);
  t.out_hidden = v.i({"projector_input_dim"}, false, 4096);
  t.projector_bias = v.b("multi_modal_projector_bias", false);
  const int64_t side = t.patch_size > 0 ? t.image_size / t.patch_size : 0;
  if (t.layers <= 0 || t.hidden <= 0 || t.heads <= 0 || t.hidden % t.heads != 0 || (t.hidden / t.heads) % 2 != 0 ||
      t.channels <= 0 || t.patch_size <= 0 || t.image_size % t.patch_size != 0 || t.shuffle < 1 ||
      std::abs(1.0 / double(t.shuffle) - ratio) > 1e-9 || side % t.shuffle != 0 || t.adapter_dim <= 0 || t.out_hidden <= 0 ||
      t.ffn != t.hidden * t.shuffle * t.shuffle)
    throw InputError(v.path + ": layers, widths and heads must be positive, image_size whole patches, pixel_shuffle_ratio "
                              "1 / n dividing the patches a side, and intermediate_size the hidden size x n^2 (the shuffled width)");
  set_image_size(lm, kDefaultImage, kDefaultImage);
}

// Mistral 3's Pixtral tower and projector (Mistral3Config): vision_config over Mistral Small
// 3.1's tower (24 layers of 1024, 16 heads, a gated SiLU MLP of 4096, patches of 14, images of at
// most 1540 pixels a side; PixtralVisionConfig's own defaults describe another model), the
// projector's spatial_merge_size, projector_hidden_act and multimodal_projector_bias. Several
// feature layers: not built (config_multimodal_note says so).
void read_pixtral_vision(const json& j, const std::string& path, ModelConfig& lm) {
  const Reader outer{j, path};
  auto layer = j.find("vision_feature_layer");
  if (layer != j.end() && !layer->is_null() && !layer->is_number_integer()) return;
  const std::string where = path + " vision_config";
  const Reader v{vision_config(j, path), where};
  ModelConfig::VisionTower& t = lm.vision;
  t.kind = ModelConfig::VisionTower::Kind::pixtral;
  t.layers = v.i({"num_hidden_layers"}, false, 24);
  t.hidden = v.i({"hidden_size"}, false, 1024);
  t.heads = v.i({"num_attention_heads"}, false, 16);
  t.ffn = v.i({"intermediate_size"}, false, 4096);
  t.channels = v.i({"num_channels"}, false, 3);
  t.patch_size = v.i({"patch_size"}, false, 14);
  t.longest_edge = v.i({"image_size"}, false, 1540);
  t.activation = v.s({"hidden_act"}, "silu");
  t.layer_norm_eps = 1e-5;
  t.merge_size = outer.i({"spatial_merge_size"}, false, 2);
  t.projector_activation = outer.s({"projector_hidden_act"}, "gelu");
  t.projector_bias = outer.b("multimodal_projector_bias", false);
  t.out_hidden = lm.hidden;
  const int64_t fl = layer == j.end() || layer->is_null() ? -1 : layer->get<int64_t>();
  t.feature_layer = fl < 0 ? t.layers + 1 + fl : fl;
  if (t.layers <= 0 || t.hidden <= 0 || t.heads <= 0 || t.hidden % t.heads != 0 || (t.hidden / t.heads) % 4 != 0 ||
      t.ffn <= 0 || t.channels <= 0 || t.patch_size <= 0 || t.merge_size <= 0 || t.longest_edge < t.patch_size * t.merge_size)
    throw InputError(v.path + ": layers, widths, heads (dividing the width into heads of a multiple of 4), patch and merge "
                              "sizes must be positive, image_size at least a merged patch");
  if (t.feature_layer < 0 || t.feature_layer > t.layers)
    throw InputError(path + ": vision_feature_layer " + std::to_string(fl) + " is not one of the tower's " +
                     std::to_string(t.layers + 1) + " hidden states");
  set_image_size(lm, kDefaultImage, kDefaultImage);
}

// The config in `j`, read from `path` (named in errors); `source` names it in the graph.
ModelConfig config_from_json(const json& j, const std::string& path, const std::string& source) {
  if (!j.is_object()) throw InputError(path + ": config must be a JSON object");
  ModelConfig c;
  c.source = source;
  const Reader r{j, path};
  c.model_type = r.s({"model_type"}, "");
  if (c.model_type.empty()) throw InputError(path + ": missing field 'model_type'");
  auto it = families().find(c.model_type);
  if (it == families().end()) {
    if (auto text = language_model_config(j)) {
      ModelConfig lm = config_from_json(*text, path + " text_config", source);
      lm.language_model_of = c.model_type;
      if (c.model_type == "llava" || c.model_type == "llava_next" || c.model_type == "paligemma")
        read_vision_tower(j, path, lm);
      if (c.model_type == "qwen3_vl" || c.model_type == "qwen3_vl_moe") read_qwen_vision(r, lm);
      if (c.model_type == "mistral3") read_pixtral_vision(j, path, lm);
      if (c.model_type == "llama4") read_llama4_vision(j, path, lm);
      return lm;
    }
    throw InputError(path + ": model_type '" + c.model_type + "' is not supported (" + supported_list() + ")");
  }
  it->second.read(r, c);
  read_quantization(r, c);
  // transformers 4.56 and later save the checkpoint's precision as `dtype`, earlier ones as `torch_dtype`.
  c.torch_dtype = r.s({"torch_dtype", "dtype"}, "");
  const bool mlp = c.block_pattern.empty() || c.block_pattern.find('-') != std::string::npos;  // Mamba-2 has none
  if (c.layers <= 0 || c.hidden <= 0 || c.heads <= 0 || (c.vocab <= 0 && c.image_size <= 0) || (mlp && c.ffn <= 0))
    throw InputError(path + ": layers, hidden size, heads, vocabulary and FFN size must be positive");
  const int64_t all_layers = c.layers + c.decoder_layers + c.mtp_layers;
  if (all_layers > kMaxLayers) throw InputError(path + ": more than " + std::to_string(kMaxLayers) + " layers");
  if (all_layers * std::max<int64_t>(c.experts, 1) > kMaxLayerExperts)
    throw InputError(path + ": more than " + std::to_string(kMaxLayerExperts) + " expert MLPs over all layers");
  if (c.head_dim == 0) {
    if (c.hidden % c.heads != 0) throw InputError(path + ": hidden size must be a multiple of the head count");
    c.head_dim = c.hidden / c.heads;
  }
  if (c.kv_heads == 0) c.kv_heads = c.heads;
  return c;
}

}  // namespace

ModelConfig read_hf_config(const std::string& given) {
  std::error_code ec;
  std::string path = given;
  // A model's folder (a Hugging Face snapshot, a save_pretrained output): its config.json,
  // named after the folder.
  std::string source = std::filesystem::path(given).filename().string();
  if (std::filesystem::is_directory(given, ec)) {
    const std::filesystem::path inside = std::filesystem::path(given) / "config.json";
    if (!std::filesystem::is_regular_file(inside, ec))
      throw InputError(given + ": is a directory without a config.json");
    path = inside.string();
    source = std::filesystem::path(given).lexically_normal().filename().string();
    if (source.empty()) source = std::filesystem::path(given).lexically_normal().parent_path().filename().string();
  }
  std::ifstream f(path);
  if (!f) throw InputError(path + ": cannot open config");
  json j;
  try {
    j = json::parse(f);
  } catch (const json::exception&) {
    throw InputError(path + ": malformed JSON config");
  }
  return config_from_json(j, path, source);
}

ModelConfig parse_hf_config(const std::string& text, const std::string& what) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception&) {
    throw InputError(what + ": malformed JSON config");
  }
  return config_from_json(j, what, what);
}

std::string config_dtype_note(const ModelConfig& c) {
  const char* flag = c.torch_dtype == "bfloat16" ? "bf16" : c.torch_dtype == "float16" ? "fp16" : nullptr;
  if (!flag) return "";
  return c.source + " stores its weights in " + c.torch_dtype + "; predicted in fp32, as PyTorch's from_pretrained loads it by default (--dtype " + flag + " for " + c.torch_dtype + ")";
}

DType config_serving_dtype(const ModelConfig& c) { return c.torch_dtype == "bfloat16" ? DType::bf16 : DType::f16; }

std::string config_serving_dtype_note(const ModelConfig& c) {
  if (c.torch_dtype == "bfloat16" || c.torch_dtype == "float16") return "";
  return c.source + (c.torch_dtype.empty() ? " names no torch_dtype (an FP32 checkpoint)" : " stores its weights in " + c.torch_dtype) +
         "; served in fp16, as vLLM's --dtype auto loads such a checkpoint (--dtype fp32 to keep FP32)";
}

std::string config_parallel_note(const ModelConfig& c, int tp) {
  if (tp <= 1) return "";
  std::vector<std::string> bad;
  const auto need = [&](int64_t v, const char* what) {
    if (v > 0 && v % tp != 0) bad.push_back(std::string(what) + " " + std::to_string(v));
  };
  need(c.heads, "attention heads");
  if (c.kv_heads > 0 && c.kv_heads % tp != 0 && tp % c.kv_heads != 0)
    bad.push_back("KV heads " + std::to_string(c.kv_heads) + " (nor a divisor of tp)");
  need(c.ffn, "intermediate size");
  need(c.expert_ffn, "expert intermediate size");
  if (bad.empty()) return "";
  std::string list;
  for (const auto& b : bad) list += (list.empty() ? "" : ", ") + b;
  return "tp=" + std::to_string(tp) + " does not divide " + c.source + "'s " + list +
         ": Megatron and vLLM refuse that split; predicted with the shards padded";
}

namespace {

// Llama4ImageProcessor's get_best_fit: the canvases of r x c tiles (r c <= max_tiles), each
// scaling the image by min(canvas / image) per side; the least upscaling when some canvas holds
// the image unshrunk, else the least shrinking; the fewest tiles among equals.
void fit_tiles(ModelConfig::VisionTower& v, int64_t height, int64_t width) {
  auto scale = [&](int64_t r, int64_t c) {
    return std::min(double(c * v.image_size) / double(width), double(r * v.image_size) / double(height));
  };
  bool up = false;
  for (int64_t r = 1; r <= v.max_tiles; ++r)
    for (int64_t c = 1; r * c <= v.max_tiles; ++c) up = up || scale(r, c) >= 1;
  double best = up ? std::numeric_limits<double>::infinity() : 0;
  for (int64_t r = 1; r <= v.max_tiles; ++r)
    for (int64_t c = 1; r * c <= v.max_tiles; ++c) {
      const double sc = scale(r, c);
      if (up != (sc >= 1)) continue;
      if ((up ? sc < best : sc > best) || (sc == best && r * c < v.tile_rows * v.tile_cols)) {
        best = sc;
        v.tile_rows = r;
        v.tile_cols = c;
      }
    }
}

// PixtralImageProcessor: the image fit within longest_edge, its sides up to whole patches.
void fit_longest_edge(ModelConfig::VisionTower& v, int64_t height, int64_t width) {
  const double ratio = std::max(double(height), double(width)) / double(v.longest_edge);
  const int64_t h = ratio > 1 ? static_cast<int64_t>(std::floor(double(height) / ratio)) : height;
  const int64_t w = ratio > 1 ? static_cast<int64_t>(std::floor(double(width) / ratio)) : width;
  const int64_t rows = std::max(v.merge_size, (std::max<int64_t>(h, 1) - 1) / v.patch_size + 1);
  const int64_t cols = std::max(v.merge_size, (std::max<int64_t>(w, 1) - 1) / v.patch_size + 1);
  v.image_size = rows * v.patch_size;
  v.image_width = cols * v.patch_size;
}

// Qwen2VLImageProcessor's smart_resize with the checkpoint's pixel bounds: each side rounded to
// a multiple of patch_size x merge_size, the area then scaled into [min_pixels, max_pixels].
void smart_resize(ModelConfig::VisionTower& v, int64_t height, int64_t width) {
  const double min_pixels = double(v.min_pixels), max_pixels = double(v.max_pixels);
  const double factor = double(v.patch_size * v.merge_size), h = double(height), w = double(width);
  if (std::max(h, w) / std::min(h, w) > 200) throw InputError("--image-size: the aspect ratio must be at most 200");
  double hb = std::max(factor, std::nearbyint(h / factor) * factor), wb = std::max(factor, std::nearbyint(w / factor) * factor);
  if (hb * wb > max_pixels) {
    const double beta = std::sqrt(h * w / max_pixels);
    hb = std::max(factor, std::floor(h / beta / factor) * factor);
    wb = std::max(factor, std::floor(w / beta / factor) * factor);
  } else if (hb * wb < min_pixels) {
    const double beta = std::sqrt(min_pixels / (h * w));
    hb = std::ceil(h * beta / factor) * factor;
    wb = std::ceil(w * beta / factor) * factor;
  }
  v.image_size = static_cast<int64_t>(hb);
  v.image_width = static_cast<int64_t>(wb);
}

}  // namespace

namespace {

// DINOv2's image as given: whole patches each side, at most 1024 a side, the positions
// interpolated to its grid by the builder.
void set_dinov2_image(ModelConfig& c, int64_t height, int64_t width) {
  const int64_t p = c.patch_size;
  if (height <= 0 || width <= 0 || height % p != 0 || width % p != 0 || height / p > 1024 || width / p > 1024)
    throw InputError("--image-size: a " + c.model_type + " image's height and width must be positive multiples of its patch_size (" +
                     std::to_string(p) + " pixels), at most 1024 patches a side");
  c.image_size = height;
  c.vit.image_width = width;
}

}  // namespace

void set_image_size(ModelConfig& c, int64_t height, int64_t width) {
  ModelConfig::VisionTower& v = c.vision;
  if (c.vit.position_grid > 0) return set_dinov2_image(c, height, width);
  if (!v.qwen() && !v.pixtral() && !v.llama4() && v.pinpoints.empty())
    throw InputError("--image-size applies to Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Mistral 3, Llama 4, LLaVA-NeXT and DINOv2 configs, whose processors take any "
                     "image; " + (c.source.empty() ? std::string("this config") : c.source) +
                     (v.layers > 0 || c.image_size > 0 ? "'s tower takes its config's image_size" : " has no vision tower"));
  if (height <= 0 || width <= 0 || height > (1 << 16) || width > (1 << 16))
    throw InputError("--image-size: height and width must be between 1 and 65536 pixels");
  v.given_height = height;
  v.given_width = width;
  if (v.llama4()) fit_tiles(v, height, width);
  else if (v.pixtral()) fit_longest_edge(v, height, width);
  else if (v.qwen()) smart_resize(v, height, width);
  else set_grid_image(v, height, width);
}

void set_images(ModelConfig& c, int64_t images) {
  if (!c.image_in_sequence())
    throw InputError("--images applies to vision-language configs whose image tower is built; " +
                     (c.source.empty() ? std::string("this config") : c.source) + " has none");
  if (images < 1 || images > 256) throw InputError("--images: expected 1 to 256 images per sequence");
  c.vision.images = images;
}

std::string config_multimodal_note(const ModelConfig& c) {
  if (c.language_model_of.empty()) return "";
  const std::string images = c.vision.images > 1 ? std::to_string(c.vision.images) + " images per sequence (--images)"
                                                 : std::string("one image per sequence");
  if (c.image_in_sequence() && c.vision.llama4())
    return c.source + " is a " + c.language_model_of + " model: its vision model (" + std::to_string(c.vision.layers) +
           " layers) and projector run on " + images + ", " +
           std::to_string(c.vision.given_height) + " x " + std::to_string(c.vision.given_width) + " pixels on " + std::to_string(c.vision.tile_rows) + " x " + std::to_string(c.vision.tile_cols) + " tiles of " +
           std::to_string(c.vision.image_size) + (c.vision.tiles() > 1 ? " and a global one" : "") +
           " (--image-size), whose " + std::to_string(c.vision.sequence_tokens()) + " tokens are among its sequence's";
  if (c.image_in_sequence() && (c.vision.qwen() || c.vision.pixtral()))
    return c.source + " is a " + c.language_model_of + " model: its vision tower (" + std::to_string(c.vision.layers) +
           " layers) and merger run on " + images + ", " + std::to_string(c.vision.image_size) + " x " +
           std::to_string(c.vision.image_width) + " pixels as its processor resizes it (--image-size), whose " +
           std::to_string(c.vision.sequence_tokens()) + " tokens are among its sequence's";
  if (c.image_in_sequence())
    return c.source + " is a " + c.language_model_of + " model: its vision tower (" + std::to_string(c.vision.layers) +
           (c.vision.siglip() ? " SigLIP layers, " : " CLIP layers, ") + std::to_string(c.vision.image_size) + " pixels) and projector run on " + images +
           (c.vision.crops() > 1 ? " (" + (c.vision.given_height > 0 ? std::to_string(c.vision.given_height) + " x " +
                                                                           std::to_string(c.vision.given_width) + " pixels"
                                                                     : std::string("a square image")) +
                                       ": " + std::to_string(c.vision.grid_rows) + " x " + std::to_string(c.vision.grid_cols) +
                                       " crops and the whole image, --image-size)"
                                 : std::string()) +
           ", whose " + std::to_string(c.vision.sequence_tokens()) + " tokens are among its sequence's";
  return c.source + " is a " + c.language_model_of + " model: its language model (" + c.model_type +
         ") is predicted; its vision tower and projector are not built";
}

std::string config_quantization_note(const ModelConfig& c) {
  if (c.quant_method.empty() || c.weight_bits > 0 || c.expert_weight_bits > 0) return "";
  return c.source + "'s quantization_config (quant_method " + c.quant_method +
         ") is not modelled: its weights are predicted in the model's dtype (GPTQ and AWQ are)";
}

bool mamba_layer(const ModelConfig& c, int64_t l) {
  const size_t i = static_cast<size_t>(l);
  return l >= 0 && ((i < c.block_pattern.size() && c.block_pattern[i] == 'M') || (i < c.mamba_layers.size() && c.mamba_layers[i]));
}

bool delta_layer(const ModelConfig& c, int64_t l) {
  return l >= 0 && static_cast<size_t>(l) < c.delta_layers.size() && c.delta_layers[static_cast<size_t>(l)];
}

bool attention_layer(const ModelConfig& c, int64_t l) {
  if (mamba_layer(c, l) || delta_layer(c, l)) return false;
  return c.block_pattern.empty() || (l >= 0 && static_cast<size_t>(l) < c.block_pattern.size() &&
                                     c.block_pattern[static_cast<size_t>(l)] == '*');
}

bool supports_kv_cache(const ModelConfig& c) {
  auto it = families().find(c.model_type);
  return it != families().end() && it->second.build_step != nullptr;
}

LoadedModel build_model(const ModelConfig& c, const BuildOptions& o) {
  auto it = families().find(c.model_type);
  if (it == families().end()) throw InputError("model_type '" + c.model_type + "' is not supported (" + supported_list() + ")");
  if (c.layers <= 0 || c.hidden <= 0 || c.heads <= 0 || c.head_dim <= 0)
    throw InputError("model config: layers, hidden size, heads and head size must be positive");
  if (!o.kv_cache && !o.last_logits) return it->second.build(c);
  if (!it->second.build_step) {
    std::string list;
    for (const auto& [k, v] : families())
      if (v.build_step) list += (list.empty() ? "" : ", ") + k;
    throw InputError("model_type '" + c.model_type + "' has no KV-cache decoder step" +
                     (c.decoder_layers > 0 ? std::string(": it is an encoder-decoder; --generate covers decoder-only models") : "") +
                     " (" + list + ")");
  }
  return it->second.build_step(c, o);
}

}  // namespace neusight
