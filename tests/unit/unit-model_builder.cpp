// unit-model_builder.cpp - built model graphs against the operator graphs NeuSight traced from
// PyTorch (neusight-data/e2e/opgraph, as the fixtures under tests/data hold them): GEMM shapes
// and vector-kernel sizes.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "neusight/model_builder.h"
#include "neusight/neusight.h"
#include "opgraph.h"
#include "test_util.h"

using namespace neusight;

namespace {

std::string config_path(const std::string& name) {
  return test::fixture_dir() + "/model_configs/" + name + ".json";
}

// Forward operators of a traced graph: "Linear M,N,K" / "BMM B,M,N,K" (dataset order) and
// vector ops as "softmax|ln|vec rows*cols".
struct Traced {
  std::multiset<std::string> gemms;
  std::multiset<std::string> softmax, layernorm;
  std::multiset<int64_t> elementwise;  // element counts
};

Traced read_traced(const std::string& name) {
  const std::string path = test::fixture_dir() + "/e2e/opgraph/" + name + ".csv";
  REQUIRE_MESSAGE(std::ifstream(path).good(), "missing fixture: " << path);
  Traced t;
  for (const TracedOp& op : read_opgraph(path))
    for (const TracedKernel& k : op.fw) {
      const auto& d = k.dims;
      if ((k.kind == "Linear" && d.size() == 3) || (k.kind == "BMM" && d.size() == 4)) {
        t.gemms.insert(traced_key(k));
      } else if (k.kind.rfind("VEC", 0) == 0 && d.size() == 2) {
        const std::string rc = std::to_string(d[0]) + "x" + std::to_string(d[1]);
        if (k.kind == "VECsoftmax") t.softmax.insert(rc);
        else if (k.kind == "VECln") t.layernorm.insert(rc);
        else t.elementwise.insert(d[0] * d[1]);
      }
    }
  return t;
}

Traced lowered(const ModelConfig& c, int64_t batch, int64_t seq) {
  Options o;
  o.dims.batch = batch;
  o.dims.seq = seq;
  o.predictor = PredictorKind::roofline;
  const Analysis a = prepare(build_model(c), o);
  Traced t;
  for (const auto& k : a.kernels.kernels) {
    if (k.phase != Phase::forward) continue;
    const std::string rc = std::to_string(k.rows) + "x" + std::to_string(k.cols);
    if (k.cls == KernelClass::gemm) {
      // CUTLASS words (m rows, n output cols, k reduction) -> dataset (M, N=reduction, K).
      const auto& g = k.gemm;
      t.gemms.insert(g.batch == 1 ? "Linear " + std::to_string(g.m) + "," + std::to_string(g.k) + "," + std::to_string(g.n)
                                  : "BMM " + std::to_string(g.batch) + "," + std::to_string(g.m) + "," +
                                        std::to_string(g.k) + "," + std::to_string(g.n));
    } else if (k.cls == KernelClass::softmax) {
      t.softmax.insert(rc);
    } else if (k.cls == KernelClass::layernorm) {
      t.layernorm.insert(rc);
    } else if (k.cls == KernelClass::elementwise) {
      t.elementwise.insert(k.rows * k.cols);
    }
  }
  return t;
}

std::string show(const std::multiset<std::string>& s) {
  std::string out;
  for (const auto& x : s) out += "\n  " + x;
  return out;
}

// The traced graph is one layer (or, for Switch, the whole model): GEMMs, softmax and layer
// norms match exactly; every traced elementwise op has a kernel of the same size in ours
// (ours may hold more: PyTorch kernels the trace files under "misc", such as OPT's max).
// `fold_batch`: compare matrix products as (B*M, N, K); the Switch trace records some of its
// batched matmuls as Linear layers of that shape.
std::multiset<std::string> folded(const std::multiset<std::string>& gemms) {
  std::multiset<std::string> out;
  for (const auto& g : gemms) {
    std::vector<int64_t> d;
    std::stringstream ss(g.substr(g.find(' ') + 1));
    std::string tok;
    while (std::getline(ss, tok, ',')) d.push_back(std::stoll(tok));
    if (d.size() == 4) d = {d[0] * d[1], d[2], d[3]};
    out.insert(std::to_string(d[0]) + "," + std::to_string(d[1]) + "," + std::to_string(d[2]));
  }
  return out;
}

void check_matches(const std::string& trace, const ModelConfig& c, int64_t batch, int64_t seq, bool fold_batch = false) {
  Traced want = read_traced(trace);
  Traced got = lowered(c, batch, seq);
  if (fold_batch) {
    want.gemms = folded(want.gemms);
    got.gemms = folded(got.gemms);
  }
  INFO("trace " << trace);
  CHECK_MESSAGE(got.gemms == want.gemms, "GEMMs built:" << show(got.gemms) << "\ntraced:" << show(want.gemms));
  CHECK_MESSAGE(got.softmax == want.softmax, "softmax built:" << show(got.softmax) << "\ntraced:" << show(want.softmax));
  CHECK_MESSAGE(got.layernorm == want.layernorm, "layernorm built:" << show(got.layernorm) << "\ntraced:" << show(want.layernorm));
  std::multiset<int64_t> missing;
  std::set_difference(want.elementwise.begin(), want.elementwise.end(), got.elementwise.begin(), got.elementwise.end(),
                      std::inserter(missing, missing.begin()));
  std::string m;
  for (auto e : missing) m += " " + std::to_string(e);
  CHECK_MESSAGE(missing.empty(), "traced elementwise sizes with no kernel of that size:" << m);
}

ModelConfig one_layer(const std::string& name, const std::string& head = "") {
  ModelConfig c = read_hf_config(config_path(name));
  c.layers = 1;
  if (!head.empty()) c.head = head;
  return c;
}

}  // namespace

TEST_CASE("model_builder: GPT-2 large layer matches the traced PyTorch graph") {
  check_matches("gpt2_large-inf-1024-4", one_layer("gpt2_large"), 4, 1024);
}

TEST_CASE("model_builder: GPT-3 2.7B (GPT-2 form) layer matches the traced PyTorch graph") {
  check_matches("gpt3_27-inf-2048-2", one_layer("gpt3_27"), 2, 2048);
}

TEST_CASE("model_builder: BERT large layer matches the traced PyTorch graph") {
  // NeuSight measured inference with BertForSequenceClassification and training with
  // BertForPreTraining; the shared config names BertLMHeadModel (the "lm" head).
  CHECK(read_hf_config(config_path("bert_large")).head == "lm");
  check_matches("bert_large-inf-512-8", one_layer("bert_large", "classification"), 8, 512);
}

TEST_CASE("model_builder: OPT 1.3B layer matches the traced PyTorch graph") {
  check_matches("opt_13-inf-2048-2", one_layer("opt_13"), 2, 2048);
}

TEST_CASE("model_builder: Switch XL (4 experts, capacity 64) matches the traced PyTorch graph") {
  // The Switch trace holds the whole encoder-decoder, so the whole model is compared.
  check_matches("switchxl4-inf-512-1", read_hf_config(config_path("switchxl4")), 1, 512, true);
}

TEST_CASE("model_builder: Switch adds the relative position bias through PyTorch's permuted view") {
  // The trace: the bias embedding [s, s, heads] is permuted (a view: 'permute' launches no
  // kernel), `position_bias + mask` once (VECadd 16384x512, keeping the permuted layout) and
  // `scores += position_bias` in every self-attention layer, reading the bias with a stride
  // of `heads` floats. Cross-attention adds a contiguous zeros + mask bias.
  const ModelConfig c = read_hf_config(config_path("switchxl4"));
  for (int64_t batch : {1, 2}) {
    const int64_t seq = 512;
    Options o;
    o.dims.batch = batch;
    o.dims.seq = seq;
    o.predictor = PredictorKind::roofline;
    const Analysis a = prepare(build_model(c), o);
    const double n = double(batch) * c.heads * seq * seq;
    int self = 0, cross = 0, permute_kernels = 0, bias_mask = 0;
    for (size_t i = 0; i < a.graph.nodes.size(); ++i) {
      const std::string& name = a.graph.nodes[i].name;
      if (name.find("/permute") != std::string::npos) {
        CHECK(a.kernels.free_reason[i] == FreeReason::strided_view_read_by_elementwise);
      }
    }
    for (const Kernel& k : a.kernels.kernels) {
      if (k.node < 0) continue;
      const std::string& name = a.graph.nodes[static_cast<size_t>(k.node)].name;
      if (name.find("/permute") != std::string::npos) ++permute_kernels;
      if (name.find("SelfAttention/bias_Add") != std::string::npos) {
        ++self;
        CHECK(k.bytes == n * 12);  // each element once; one 32-byte sector per bias element ...
        REQUIRE(k.l2_reuse.size() == 1);  // ... when the L2 cannot hold seq * seq sectors
        CHECK(k.l2_reuse[0].footprint == double(seq) * seq * 32);
        CHECK(k.l2_reuse[0].miss_bytes == n * 28);
      }
      if (name.find("EncDecAttention/bias_Add") != std::string::npos) {
        ++cross;
        CHECK(k.bytes == n * 12);
      }
      if (name == "encoder/position_bias_Add" || name == "decoder/position_bias_Add") {
        ++bias_mask;
        CHECK(double(k.rows * k.cols) == n);
      }
    }
    CHECK(permute_kernels == 0);
    CHECK(self == c.layers + c.decoder_layers);
    CHECK(cross == c.decoder_layers);
    CHECK(bias_mask == 2);
  }
}

TEST_CASE("model_builder: the forward pass of the other traced runs matches too") {
  // Other model sizes, batch sizes and the training traces (whose forward operators are the
  // inference ones).
  check_matches("gpt3_xl-inf-2048-2", one_layer("gpt3_xl"), 2, 2048);
  check_matches("gpt2_large-train-1024-1", one_layer("gpt2_large"), 1, 1024);
  check_matches("bert_large-train-512-2", one_layer("bert_large", "pretraining"), 2, 512);
  check_matches("opt_13-train-2048-1", one_layer("opt_13"), 1, 2048);
  check_matches("switchxl4-inf-512-2", read_hf_config(config_path("switchxl4")), 2, 512, true);
}

TEST_CASE("model_builder: Llama-style GQA decoder has the expected GEMMs") {
  ModelConfig c;
  c.model_type = "llama";
  c.layers = 1;
  c.hidden = 256;
  c.heads = 8;
  c.kv_heads = 2;
  c.head_dim = 32;
  c.ffn = 512;
  c.vocab = 1000;
  c.activation = "silu";
  const Traced t = lowered(c, 2, 64);
  // q, o: 256x256; k, v: 256 -> 64 (2 kv heads x 32); gate, up 256 -> 512; down 512 -> 256;
  // lm_head 256 -> 1000; scores and context BMMs over all 8 query heads; rotary table 16x1x64.
  const std::multiset<std::string> want = {
      "Linear 128,256,256", "Linear 128,256,64", "Linear 128,256,64", "BMM 16,64,32,64", "BMM 16,64,64,32",
      "Linear 128,256,256", "Linear 128,256,512", "Linear 128,256,512", "Linear 128,512,256", "Linear 128,256,1000",
      "Linear 16,1,64"};
  CHECK_MESSAGE(t.gemms == want, show(t.gemms));
  CHECK(t.softmax == std::multiset<std::string>{"1024x64"});
}

// Elements of the graph's external-data weights (the model's parameters), less those named
// `skip` (a tied head the graph reads as its own matrix).
static int64_t parameters(const LoadedModel& m, const std::string& skip = "") {
  int64_t n = 0;
  for (const std::string& w : m.model.graph.initializers) {
    const TensorInfo* t = m.model.graph.find(w);
    if (t && t->external_data && (skip.empty() || w.rfind(skip, 0) != 0)) n += t->num_elements();
  }
  return n;
}

TEST_CASE("model_builder: T5 and Flan-T5 are the Switch encoder-decoder without experts, ReLU or gated GELU") {
  const ModelConfig t5 = read_hf_config(test::source_dir() + "/tests/data/t5_base.json");
  CHECK(t5.experts == 0);
  CHECK(t5.activation == "relu");
  CHECK_FALSE(t5.gated_act);
  CHECK(t5.tie_embeddings);
  const ModelConfig flan = read_hf_config(test::source_dir() + "/tests/data/flan_t5_base.json");
  CHECK(flan.gated_act);
  CHECK(flan.activation == "gelu_new");
  CHECK_FALSE(flan.tie_embeddings);
  // Parameter counts of the checkpoints: t5-base 222,903,552 with the head tied to the shared
  // table; flan-t5-base 247,577,856 with its own head.
  const LoadedModel mt5 = build_model(t5), mflan = build_model(flan);
  CHECK(parameters(mt5, "lm_head") == 222903552);
  CHECK(parameters(mflan) == 247577856);
  int routers = 0, scale = 0, gates = 0;
  for (const Node& n : mt5.model.graph.nodes) {
    routers += n.name.find("router") != std::string::npos;
    scale += n.name == "lm_head/scale_Mul";
  }
  for (const Node& n : mflan.model.graph.nodes) gates += n.name.find("/gate_Mul") != std::string::npos;
  CHECK(routers == 0);
  CHECK(scale == 1);      // the tied head scales by d_model^-0.5
  CHECK(gates == 2 * 12);  // every encoder and decoder feed-forward
  CHECK(mt5.model.graph.outputs.size() == 1);  // logits; no router losses
  // Lowered: per encoder layer q, k, v, o and wi, wo; per decoder layer twice the attention's
  // four and the feed-forward's two; the head. The gated feed-forward adds a GEMM per layer.
  const auto linears = [](const Traced& t) {
    return std::count_if(t.gemms.begin(), t.gemms.end(), [](const std::string& g) { return g.rfind("Linear", 0) == 0; });
  };
  CHECK(linears(lowered(t5, 2, 64)) == 12 * 6 + 12 * 10 + 1);
  CHECK(linears(lowered(flan, 2, 64)) == 12 * 7 + 12 * 11 + 1);
  std::ifstream f(test::source_dir() + "/tests/data/flan_t5_base.json");
  nlohmann::json j = nlohmann::json::parse(f);
  j["feed_forward_proj"] = "swiglu-gelu";
  CHECK_THROWS_WITH_AS(parse_hf_config(j.dump(), "t5"), doctest::Contains("feed_forward_proj"), InputError);
  // T5EncoderModel, the encoder alone (the text encoder of Flux and Stable Diffusion 3):
  // google/t5-v1_1-xxl's encoder has 4,762,310,656 parameters; its output is the last hidden
  // state, and it reads no decoder_input_ids.
  const ModelConfig xxl = parse_hf_config(R"({"model_type": "t5", "architectures": ["T5EncoderModel"], "d_model": 4096,
      "d_ff": 10240, "d_kv": 64, "num_heads": 64, "num_layers": 24, "vocab_size": 32128,
      "feed_forward_proj": "gated-gelu", "tie_word_embeddings": false})", "t5xxl");
  CHECK(xxl.head == "encoder");
  const LoadedModel enc = build_model(xxl);
  CHECK(parameters(enc) == 4762310656);
  REQUIRE(enc.model.graph.outputs.size() == 1);
  CHECK(enc.model.graph.outputs[0] == "last_hidden_state");
  CHECK(enc.model.graph.inputs.size() == 1);
}

TEST_CASE("model_builder: RoBERTa and XLM-RoBERTa are BERT with positions from the padding index") {
  // The published parameter counts of the base models (encoder and pooler): bert-base-uncased
  // 109,482,240; roberta-base 124,645,632; xlm-roberta-base 278,043,648 (514 position rows,
  // one token type).
  const auto sizes = [](const std::string& type, const std::string& arch, int64_t vocab, int64_t positions, int64_t types) {
    return R"({"model_type": ")" + type + R"(", "architectures": [")" + arch + R"("], "hidden_size": 768,
        "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": )" +
           std::to_string(vocab) + R"(, "max_position_embeddings": )" + std::to_string(positions) +
           R"(, "type_vocab_size": )" + std::to_string(types) + R"(, "pad_token_id": 1})";
  };
  const ModelConfig bert = parse_hf_config(sizes("bert", "BertModel", 30522, 512, 2), "bert-base-uncased");
  const ModelConfig roberta = parse_hf_config(sizes("roberta", "RobertaModel", 50265, 514, 1), "roberta-base");
  const ModelConfig xlmr = parse_hf_config(sizes("xlm-roberta", "XLMRobertaModel", 250002, 514, 1), "xlm-roberta-base");
  CHECK(parameters(build_model(bert)) == 109482240);
  CHECK(parameters(build_model(roberta)) == 124645632);
  CHECK(parameters(build_model(xlmr)) == 278043648);
  // 512 tokens fit RoBERTa's 514 rows (positions 2 .. 513), counted by a cumulative sum over
  // the non-padding tokens.
  CHECK(roberta.max_positions == 512);
  const LoadedModel m = build_model(roberta);
  const auto count = [&](const std::string& op) {
    return std::count_if(m.model.graph.nodes.begin(), m.model.graph.nodes.end(), [&](const Node& n) { return n.op_type == op; });
  };
  CHECK(count("CumSum") == 1);
  CHECK(m.model.graph.outputs.size() == 2);  // the pooled output and the last hidden state
  // RobertaForSequenceClassification: its head on the first token, no pooler.
  const LoadedModel cls =
      build_model(parse_hf_config(sizes("roberta", "RobertaForSequenceClassification", 50265, 514, 1), "cls"));
  CHECK(parameters(cls) == 124645632 - 768 * 768 - 768 + 768 * 768 + 768 + 768 * 2 + 2);
  CHECK(std::none_of(cls.model.graph.nodes.begin(), cls.model.graph.nodes.end(),
                     [](const Node& n) { return n.name.find("pooler") != std::string::npos; }));
  CHECK_THROWS_WITH_AS(parse_hf_config(sizes("roberta", "RobertaModel", 50265, 2, 1), "r"),
                       doctest::Contains("max_position_embeddings"), InputError);
  // CamemBERT is RoBERTa with its own vocabulary (camembert-base: 32,005 tokens).
  const ModelConfig camembert = parse_hf_config(sizes("camembert", "CamembertModel", 32005, 514, 1), "camembert-base");
  CHECK(camembert.head == "base");
  CHECK(parameters(build_model(camembert)) == 124645632 + (32005 - 50265) * 768);
}

TEST_CASE("model_builder: ModernBERT alternates global and sliding-window attention, rotary, GeGLU, no biases") {
  // answerdotai/ModernBERT-base (ModernBertForMaskedLM): 149,655,232 parameters as published,
  // the decoder's weight tied to the token embeddings; ModernBertModel 149,014,272.
  ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/modernbert_base.json");
  CHECK(c.head == "lm");
  auto params = [](const LoadedModel& m, const std::string& skip) {
    int64_t n = 0;
    for (const std::string& w : m.model.graph.initializers) {
      const TensorInfo* t = m.model.graph.find(w);
      if (t && t->external_data && w.find("inv_freq") == std::string::npos && w != skip) n += t->num_elements();
    }
    return n;
  };
  const LoadedModel lm = build_model(c);
  CHECK(params(lm, "decoder.weight") == 149655232);
  c.head = "base";
  const LoadedModel base = build_model(c);
  CHECK(params(base, "") == 149014272);
  // Layers 0, 3, ..., 21 attend globally (the padding mask), the others within 128 tokens.
  std::string global_mask, sliding_mask;
  for (const Node& n : base.model.graph.nodes) {
    if (n.name == "model/mask_masked_fill") global_mask = n.outputs[0];
    if (n.name == "model/sliding_window_mask") sliding_mask = n.outputs[0];
  }
  int global = 0, sliding = 0;
  for (const Node& n : base.model.graph.nodes)
    for (const auto& in : n.inputs) {
      global += in == global_mask;
      sliding += in == sliding_mask;
    }
  // The global mask also fills the sliding one.
  --global;
  CHECK(global == 8);
  CHECK(sliding == 14);
  const auto count = [&](const std::string& op) {
    return std::count_if(base.model.graph.nodes.begin(), base.model.graph.nodes.end(), [&](const Node& n) { return n.op_type == op; });
  };
  CHECK(count("Cos") == 22);   // each layer's rotary tables
  CHECK(count("Gelu") == 22);  // GeGLU: one GELU per layer, times the gate
  CHECK(count("LayerNormalization") == 1 + 21 + 22 + 1);  // embeddings, attn_norm (not layer 0), mlp_norm, final
  // The sequence classifier: mean pooling (the config's), the prediction head, the classifier.
  c.head = "classification";
  const LoadedModel cls = build_model(c);
  CHECK(params(cls, "") == 149014272 + 768 * 768 + 768 + 768 * 2 + 2);
  CHECK_THROWS_WITH_AS(parse_hf_config(R"({"model_type": "modernbert", "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 2, "intermediate_size": 96, "vocab_size": 100, "classifier_pooling": "max"})", "m"),
                       doctest::Contains("classifier_pooling"), InputError);
}

TEST_CASE("model_builder: DeBERTa-v3 adds content-to-position and position-to-content terms from bucketed relative positions") {
  // microsoft/deberta-v3-base: 184,423,682 parameters with the sequence classifier (two
  // labels), as published; DebertaV2Model 183,831,552 (98.4 M of them the 128,100-token table).
  ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/deberta_v3_base.json");
  CHECK(c.head == "classification");
  CHECK(c.deberta.span == 256);
  CHECK(c.deberta.max_relative == 512);
  CHECK((c.deberta.c2p && c.deberta.p2c && c.deberta.norm_rel && !c.deberta.position_input));
  CHECK(parameters(build_model(c)) == 184423682);
  c.head = "base";
  const LoadedModel base = build_model(c);
  CHECK(parameters(base) == 183831552);
  const auto count = [&](const std::string& op) {
    return std::count_if(base.model.graph.nodes.begin(), base.model.graph.nodes.end(), [&](const Node& n) { return n.op_type == op; });
  };
  // Per layer: q, k, v, o, intermediate and output; the relative embeddings through the key and
  // query projections; the content, c2p, p2c and value products.
  CHECK(count("MatMul") == 12 * (6 + 2 + 4));
  CHECK(count("GatherElements") == 24);
  CHECK(count("Tile") == 24);  // the projected embeddings repeated over the batch
  CHECK(count("Log") == 1);    // the log buckets, once
  // Only c2p: one gather a layer, the scale sqrt(3 x head_dim) becomes sqrt(2 x head_dim).
  const std::string base_json = R"({"model_type": "deberta-v2", "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 100, "relative_attention": true,
      "share_att_key": true, "position_buckets": 32, "max_relative_positions": -1, "pos_att_type": ["c2p"])";
  const LoadedModel c2p = build_model(parse_hf_config(base_json + "}", "d"));
  CHECK(std::count_if(c2p.model.graph.nodes.begin(), c2p.model.graph.nodes.end(),
                      [](const Node& n) { return n.op_type == "GatherElements"; }) == 2);
  CHECK_THROWS_WITH_AS(parse_hf_config(base_json + R"(, "conv_kernel_size": 3})", "d"), doctest::Contains("conv_kernel_size"),
                       InputError);
}

// Nodes of type `op` in a built model.
static int64_t count_ops(const LoadedModel& m, const std::string& op) {
  return std::count_if(m.model.graph.nodes.begin(), m.model.graph.nodes.end(), [&](const Node& n) { return n.op_type == op; });
}

TEST_CASE("model_builder: DeBERTa (v1) projects q, k and v in one GEMM and its relative span through pos_proj and pos_q_proj") {
  // microsoft/deberta-base (its config.json: relative_attention, pos_att_type "c2p|p2c",
  // max_relative_positions -1, position_biased_input false). DebertaModel: 138,601,728
  // parameters = word embeddings 50,265 x 768 (38,603,520) + the embeddings' LayerNorm 1,536 +
  // rel_embeddings 2 x 512 x 768 (786,432) + 12 layers x 8,267,520 (in_proj 768 x 2,304 =
  // 1,769,472, q_bias and v_bias 1,536, pos_proj 589,824, pos_q_proj 590,592, the output dense
  // 590,592, its LayerNorm 1,536, intermediate 2,362,368, output 2,360,064, its LayerNorm 1,536),
  // no position table. The sequence classifier (the default, two labels) adds the pooler's dense
  // 590,592 and the classifier 1,538: 139,193,858.
  ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/deberta_base.json");
  CHECK(c.head == "classification");
  CHECK((c.deberta.v1 && c.deberta.relative && c.deberta.c2p && c.deberta.p2c));
  CHECK((!c.deberta.position_input && !c.deberta.norm_rel && !c.learned_positions));
  CHECK(c.deberta.span == 512);
  CHECK(c.deberta.buckets == 0);
  CHECK(parameters(build_model(c)) == 139193858);
  c.head = "base";
  const LoadedModel base = build_model(c);
  CHECK(parameters(base) == 138601728);
  // Per layer: in_proj, q k^T, pos_proj, c2p, pos_q_proj, p2c, the values, the output dense,
  // intermediate and output; no repeat of the projected embeddings (v2's), the keys' ids repeated
  // once (build_relative_position); DebertaLayerNorm's two means, for 25 norms.
  CHECK(count_ops(base, "MatMul") == 12 * 10);
  CHECK(count_ops(base, "GatherElements") == 24);
  CHECK(count_ops(base, "Tile") == 1);
  CHECK(count_ops(base, "Log") == 0);
  CHECK(count_ops(base, "LayerNormalization") == 0);
  CHECK(count_ops(base, "ReduceMean") == 2 * 25);
  // att_span = min(sequence, 512): the relative embeddings' 2 x span rows through pos_proj and
  // pos_q_proj; a sequence beyond the 512 rows of max_position_embeddings runs (no position table).
  for (const auto& [seq, rows] : {std::pair<int64_t, int64_t>{128, 256}, {600, 1024}}) {
    Options o;
    o.dims.batch = 1;
    o.dims.seq = seq;
    o.predictor = PredictorKind::roofline;
    const Analysis a = prepare(base, o);
    int projections = 0;
    for (const Kernel& k : a.kernels.kernels)
      if (k.cls == KernelClass::gemm && k.gemm.batch == 1 && k.gemm.m == rows && k.gemm.n == 768 && k.gemm.k == 768) ++projections;
    CHECK(projections == 24);
    const TensorInfo* out = a.graph.find("last_hidden_state");
    REQUIRE(out);
    REQUIRE(out->shape.size() == 3);
    CHECK((out->shape[0].value == 1 && out->shape[1].value == seq && out->shape[2].value == 768));
  }
  // pos_att_type as a list, any case; one term: pos_proj alone, one gather a layer.
  const std::string small = R"({"model_type": "deberta", "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 64)";
  const LoadedModel c2p = build_model(parse_hf_config(small + R"(, "relative_attention": true, "pos_att_type": ["C2P"]})", "d"));
  CHECK(count_ops(c2p, "GatherElements") == 2);
  CHECK(c2p.model.graph.find("deberta.encoder.layer.0.attention.self.pos_proj.weight"));
  CHECK_FALSE(c2p.model.graph.find("deberta.encoder.layer.0.attention.self.pos_q_proj.weight"));
  // DebertaConfig's defaults: no relative attention, absolute positions (a table of 64 rows).
  const ModelConfig plain = parse_hf_config(small + "}", "d");
  CHECK((!plain.deberta.relative && plain.deberta.position_input && plain.learned_positions));
  const LoadedModel absolute = build_model(plain);
  CHECK(count_ops(absolute, "GatherElements") == 0);
  CHECK(absolute.model.graph.find("deberta.embeddings.position_embeddings.weight"));
  CHECK_FALSE(absolute.model.graph.find("deberta.encoder.rel_embeddings.weight"));
  CHECK_THROWS_WITH_AS(parse_hf_config(small + R"(, "talking_head": true})", "d"), doctest::Contains("talking_head"), InputError);
  CHECK_THROWS_WITH_AS(parse_hf_config(small + R"(, "max_relative_positions": "all"})", "d"),
                       doctest::Contains("'max_relative_positions' must be an integer"), InputError);
}

TEST_CASE("model_builder: DistilBERT is six post-LayerNorm layers without token types or pooler") {
  // distilbert-base-uncased (DistilBertModel): 66,362,880 parameters, as published.
  const std::string sizes = R"("dim": 768, "n_layers": 6, "n_heads": 12, "hidden_dim": 3072, "vocab_size": 30522,
      "max_position_embeddings": 512})";
  const ModelConfig base = parse_hf_config(R"({"model_type": "distilbert", "architectures": ["DistilBertModel"], )" + sizes, "d");
  CHECK(parameters(build_model(base)) == 66362880);
  const ModelConfig cls = parse_hf_config(
      R"({"model_type": "distilbert", "architectures": ["DistilBertForSequenceClassification"], )" + sizes, "d");
  const LoadedModel m = build_model(cls);
  CHECK(parameters(m) == 66362880 + 768 * 768 + 768 + 768 * 2 + 2);
  const auto count = [&](const std::string& op) {
    return std::count_if(m.model.graph.nodes.begin(), m.model.graph.nodes.end(), [&](const Node& n) { return n.op_type == op; });
  };
  CHECK(count("Where") == 6);  // each layer's masked_fill
  CHECK(count("CumSum") == 0);  // positions 0 .. sequence - 1
  CHECK(m.model.graph.outputs.size() == 1);
}

TEST_CASE("model_builder: ELECTRA is BERT with narrower embeddings projected to the hidden size") {
  // electra-small-discriminator's sizes: 128-wide embeddings, 256-wide layers; the
  // discriminator's head scores each token.
  const ModelConfig small = parse_hf_config(R"({"model_type": "electra", "architectures": ["ElectraForPreTraining"],
      "embedding_size": 128, "hidden_size": 256, "num_hidden_layers": 12, "num_attention_heads": 4,
      "intermediate_size": 1024, "vocab_size": 30522})", "electra-small");
  CHECK(small.head == "pretraining");
  const int64_t embeddings = (30522 + 512 + 2) * 128 + 2 * 128, project = 128 * 256 + 256;
  const int64_t layer = 4 * (256 * 256 + 256) + 2 * 256 + (256 * 1024 + 1024) + (1024 * 256 + 256) + 2 * 256;
  const int64_t head = 256 * 256 + 256 + 256 + 1;
  const LoadedModel m = build_model(small);
  CHECK(parameters(m) == embeddings + project + 12 * layer + head);
  CHECK(m.model.graph.outputs.size() == 1);
  // Equal widths need no projection; ElectraModel has no pooler.
  const ModelConfig base = parse_hf_config(R"({"model_type": "electra", "architectures": ["ElectraModel"],
      "embedding_size": 768, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
      "intermediate_size": 3072, "vocab_size": 30522})", "electra-base");
  CHECK(parameters(build_model(base)) == 109482240 - (768 * 768 + 768));  // bert-base without its pooler
}

TEST_CASE("model_builder: ALBERT holds one layer's weights and runs them on every layer") {
  // albert-base-v2 (AlbertModel): 11,683,584 parameters, as published; its 12 layers' GEMMs
  // all read the one shared layer's weights.
  const ModelConfig c = parse_hf_config(R"({"model_type": "albert", "architectures": ["AlbertModel"],
      "embedding_size": 128, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
      "intermediate_size": 3072, "vocab_size": 30000, "hidden_act": "gelu_new"})", "albert-base-v2");
  const LoadedModel m = build_model(c);
  CHECK(parameters(m) == 11683584);
  const std::string query = "albert.encoder.albert_layer_groups.0.albert_layers.0.attention.query.weight";
  const auto readers = std::count_if(m.model.graph.nodes.begin(), m.model.graph.nodes.end(), [&](const Node& n) {
    return std::find(n.inputs.begin(), n.inputs.end(), query) != n.inputs.end();
  });
  CHECK(readers == 12);
  CHECK_THROWS_WITH_AS(parse_hf_config(R"({"model_type": "albert", "hidden_size": 768, "num_hidden_layers": 12,
      "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30000, "num_hidden_groups": 2})", "a"),
                       doctest::Contains("layer group"), InputError);
}

TEST_CASE("model_builder: MPNet is BERT without token types, with a relative position bias on every layer") {
  // all-mpnet-base-v2's sizes (MPNetModel): 30,527 tokens, 514 position rows, 32 buckets x 12
  // heads of bias: bert-base's 109,482,240 + 5 x 768 tokens - 2 x 768 token types + 2 x 768
  // positions + 384 = 109,486,464.
  const ModelConfig c = parse_hf_config(R"({"model_type": "mpnet", "architectures": ["MPNetModel"], "hidden_size": 768,
      "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30527,
      "max_position_embeddings": 514, "pad_token_id": 1})", "all-mpnet-base-v2");
  CHECK(c.max_positions == 512);
  const LoadedModel m = build_model(c);
  CHECK(parameters(m) == 109486464);
  const auto count = [&](const std::string& op) {
    return std::count_if(m.model.graph.nodes.begin(), m.model.graph.nodes.end(), [&](const Node& n) { return n.op_type == op; });
  };
  CHECK(count("Expand") == 1);  // the bias, made contiguous for the batch once
  const auto bias_reads = std::count_if(m.model.graph.nodes.begin(), m.model.graph.nodes.end(), [](const Node& n) {
    return n.name.find("/bias_Add") != std::string::npos;
  });
  CHECK(bias_reads == 12);
  CHECK(count("CumSum") == 1);  // positions from the padding index
}

TEST_CASE("model_builder: a model's folder reads as its config.json, named after the folder") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "neusight-unit-snapshot" / "Falcon-7B";
  std::filesystem::remove_all(dir.parent_path());
  std::filesystem::create_directories(dir);
  CHECK_THROWS_WITH_AS(read_hf_config(dir.string()), doctest::Contains("without a config.json"), InputError);
  std::filesystem::copy_file(test::source_dir() + "/tests/data/falcon_7b.json", dir / "config.json");
  const ModelConfig c = read_hf_config(dir.string());
  CHECK(c.model_type == "falcon");
  CHECK(c.source == "Falcon-7B");
  CHECK(read_hf_config(dir.string() + "/").source == "Falcon-7B");
  std::filesystem::remove_all(dir.parent_path());
}

TEST_CASE("model_builder: a multimodal config builds its language model, and LLaVA's CLIP vision tower and projector") {
  // LLaVA-1.5: text_config lists only what differs from LlamaConfig's defaults.
  const ModelConfig llava = read_hf_config(test::source_dir() + "/tests/data/llava_1.5_7b.json");
  CHECK(llava.model_type == "llama");
  CHECK(llava.language_model_of == "llava");
  CHECK(llava.layers == 32);
  CHECK(llava.hidden == 4096);
  CHECK(llava.ffn == 11008);
  CHECK(llava.vocab == 32064);
  CHECK(llava.torch_dtype == "float16");
  // CLIP ViT-L/14 at 336 pixels (CLIPVisionConfig's defaults under the fields given): 24
  // layers, hidden_states[-2] (the 23rd layer's output), its 576 patches without the class token.
  CHECK(llava.vision.layers == 24);
  CHECK(llava.vision.activation == "quick_gelu");
  CHECK(llava.vision.feature_layer == 23);
  CHECK(llava.vision.tokens() == 576);
  CHECK(config_multimodal_note(llava).find("vision tower (24 CLIP layers, 336 pixels)") != std::string::npos);
  // Vicuna-7B with vocab 32064 (6,738,939,904, less inv_freq), CLIP ViT-L/14-336's vision model
  // (303,507,456) and the projector (1024 -> 4096 -> 4096 with biases: 20,979,712).
  const LoadedModel full = build_model(llava);
  CHECK(parameters(full) - 64 == 6738939904 + 303507456 + 20979712);
  CHECK(parameters(full, "vision_tower") - 64 == 6738939904 + 20979712);
  CHECK(full.model.graph.find("pixel_values"));
  // A decode step runs the language model alone.
  CHECK_FALSE(build_model(llava, BuildOptions{true}).model.graph.find("pixel_values"));
  // Several feature layers, or a tower other than CLIP's: the language model alone, and the note says so.
  const std::string text = R"("model_type": "llava", "text_config": {"model_type": "llama", "num_hidden_layers": 2})";
  const ModelConfig multi = parse_hf_config("{" + text + R"(, "vision_feature_layer": [-2, -5]})", "llava");
  CHECK(multi.vision.layers == 0);
  CHECK(config_multimodal_note(multi).find("not built") != std::string::npos);
  CHECK(parse_hf_config("{" + text + R"(, "vision_config": {"model_type": "siglip_vision_model"}})", "llava").vision.layers == 0);
  CHECK(parse_hf_config("{" + text + "}", "llava").vision.layers == 24);  // LlavaConfig's default tower
  CHECK_THROWS_WITH_AS(parse_hf_config("{" + text + R"(, "vision_feature_layer": -30})", "llava"),
                       doctest::Contains("vision_feature_layer -30"), InputError);
  // PaliGemma-3B-224: SigLIP So400m/14 (no class token, post_layernorm over every token:
  // 412,442,352 parameters) and one 1152 -> 2048 projection (2,361,344) before Gemma.
  const ModelConfig pali = parse_hf_config(
      R"({"model_type": "paligemma", "text_config": {"model_type": "gemma", "hidden_size": 2048, "intermediate_size": 16384,
          "num_attention_heads": 8, "num_key_value_heads": 1, "num_hidden_layers": 18, "vocab_size": 257216},
          "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304,
          "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": false}})",
      "paligemma");
  CHECK(pali.vision.siglip());
  CHECK(pali.vision.tokens() == 256);
  CHECK(pali.vision.activation == "gelu_pytorch_tanh");
  ModelConfig pali_text = pali;
  pali_text.vision = ModelConfig::VisionTower{};
  CHECK(parameters(build_model(pali)) - parameters(build_model(pali_text)) == 412442352 + 2361344);
  CHECK(config_multimodal_note(pali).find("27 SigLIP layers") != std::string::npos);
  // Qwen2-VL keeps the language model's fields at the top level: Qwen2 with Q, K, V biases.
  const ModelConfig qvl = read_hf_config(test::source_dir() + "/tests/data/qwen2_vl_7b.json");
  CHECK(qvl.model_type == "qwen2");
  CHECK(qvl.language_model_of == "qwen2_vl");
  CHECK(qvl.qkv_bias);
  ModelConfig qvl_text = qvl;
  qvl_text.vision = ModelConfig::VisionTower{};
  CHECK(parameters(build_model(qvl_text)) - 64 == 7615616512);  // Qwen2-7B's (less inv_freq)
  CHECK(config_multimodal_note(read_hf_config(test::source_dir() + "/tests/data/falcon_7b.json")).empty());
  // A text_config of a family not built is the outer type's error.
  CHECK_THROWS_WITH_AS(parse_hf_config(R"({"model_type": "idefics3", "text_config": {"model_type": "mamba"}})", "vlm"),
                       doctest::Contains("'idefics3' is not supported"), InputError);
}

TEST_CASE("model_builder: LLaVA-NeXT tiles a square image into its grid of crops beside the whole image") {
  // llava-hf/llava-v1.6-mistral-7b-hf: Mistral 7B (32,064 tokens), CLIP ViT-L/14-336 and the
  // projector as LLaVA-1.5's, plus image_newline: 7,566,747,648 parameters. A square image picks
  // the 672 x 672 pinpoint: 2 x 2 crops and the whole image, 5 x 576 features packed as 576 +
  // 48 rows of (48 + 1 newline) = 2,928 tokens.
  const std::string cfg = R"({"model_type": "llava_next", "text_config": {"model_type": "mistral", "vocab_size": 32064},
      "vision_config": {"hidden_size": 1024, "image_size": 336, "intermediate_size": 4096, "num_attention_heads": 16,
                        "num_hidden_layers": 24, "patch_size": 14},
      "image_grid_pinpoints": [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]})";
  const ModelConfig next = parse_hf_config(cfg, "llava_next");
  CHECK(next.language_model_of == "llava_next");
  CHECK(next.vision.grid_rows == 2);
  CHECK(next.vision.grid_cols == 2);
  CHECK(next.vision.crops() == 5);
  CHECK(next.vision.tokens() == 2928);
  const LoadedModel m = build_model(next);
  CHECK(parameters(m) - 64 == 7566747648);  // less the rotary inv_freq buffer
  // Prefill of one image and 100 text tokens: the tower runs on 5 crops of 577 tokens.
  Options o;
  o.dims.batch = 1;
  o.dims.seq = 2928 + 100;
  const Analysis a = prepare(m, o);
  int tower_scores = 0;
  for (const Kernel& k : a.kernels.kernels)
    tower_scores += k.cls == KernelClass::gemm && k.gemm.batch == 5 * 16 && k.gemm.m == 577 && k.gemm.n == 577;
  CHECK(tower_scores == 24);
  // Pinpoints only taller than wide: a square image keeps most of its pixels in the 1 x 2 grid.
  const ModelConfig tall = parse_hf_config(R"({"model_type": "llava_next", "text_config": {"model_type": "mistral"},
      "image_grid_pinpoints": [[672, 336], [1008, 336]]})", "llava_next");
  CHECK(tall.vision.grid_rows == 2);
  CHECK(tall.vision.grid_cols == 1);
  // unpad_image keeps the 24 of its 48 feature rows the square image covers: 576 + 24 x 25.
  CHECK(tall.vision.feature_rows == 24);
  CHECK(tall.vision.tokens() == 576 + 24 * 25);
  CHECK_THROWS_WITH_AS(parse_hf_config(R"({"model_type": "llava_next", "text_config": {"model_type": "mistral"},
      "image_grid_pinpoints": [[500, 336]]})", "llava_next"), doctest::Contains("a multiple of the tower's image_size (336)"),
                       InputError);
  // Another aspect (--image-size): select_best_resolution's grid, and unpad_image's centre of
  // the feature map. 1080 x 1920 keeps most pixels at 672 x 672 (2 x 2), whose 48 x 48 map the
  // image covers 28 rows of: 576 + 28 x 49 = 1,948 tokens (LlavaNextProcessor's count). 300 x
  // 1000 picks 336 x 1008 (1 x 3): 22 of 24 rows, 576 + 22 x 73 = 2,182.
  ModelConfig wide = next;
  set_image_size(wide, 1080, 1920);
  CHECK(wide.vision.grid_rows == 2);
  CHECK(wide.vision.grid_cols == 2);
  CHECK(wide.vision.feature_rows == 28);
  CHECK(wide.vision.feature_cols == 48);
  CHECK(wide.vision.tokens() == 1948);
  set_image_size(wide, 300, 1000);
  CHECK(wide.vision.grid_rows == 1);
  CHECK(wide.vision.grid_cols == 3);
  CHECK(wide.vision.tokens() == 2182);
  o.dims.seq = 2182 + 10;
  const Analysis w = prepare(build_model(wide), o);
  bool merged = false;  // the image's tokens and the text's, the language model's input
  for (const Node& nd : w.graph.nodes)
    if (nd.name == "model/merge_image")
      if (const TensorInfo* t = w.graph.find(nd.outputs[0])) merged = t->fully_known() && t->shape[1].value == 2192;
  CHECK(merged);
  ModelConfig plain = parse_hf_config(R"({"model_type": "llava", "text_config": {"model_type": "mistral"}})", "llava");
  CHECK_THROWS_WITH_AS(set_image_size(plain, 336, 336), doctest::Contains("takes its config's image_size"), InputError);
}

TEST_CASE("model_builder: ViT is the patch convolution, class token and positions, pre-norm layers and the class token's head") {
  // google/vit-base-patch16-224 (ViTForImageClassification, 1000 labels in id2label): 86,567,656
  // parameters; its ViTModel (a pooler instead of the classifier): 86,389,248.
  std::string labels;
  for (int i = 0; i < 1000; ++i) labels += (i ? ", \"" : "\"") + std::to_string(i) + "\": \"c" + std::to_string(i) + "\"";
  const std::string base = R"("hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
      "image_size": 224, "patch_size": 16, "num_channels": 3, "hidden_act": "gelu", "model_type": "vit")";
  const ModelConfig cls = parse_hf_config("{" + base + R"(, "architectures": ["ViTForImageClassification"], "id2label": {)" +
                                              labels + "}}", "vit");
  CHECK(cls.num_labels == 1000);
  CHECK(cls.max_positions == 197);
  const LoadedModel m = build_model(cls);
  CHECK(parameters(m) == 86567656);
  CHECK(parameters(build_model(parse_hf_config("{" + base + R"(, "architectures": ["ViTModel"]})", "vit"))) == 86389248);
  // Batch 4: the patch convolution and the 12 layers' six projections and two attention
  // products on 197 tokens, the classifier on the class token.
  Options o;
  o.dims.batch = 4;
  const Analysis a = prepare(m, o);
  int gemms = 0, convs = 0;
  for (const Kernel& k : a.kernels.kernels) {
    if (k.cls != KernelClass::gemm) continue;
    ++gemms;
    if (k.gemm.m == 4 * 196 && k.gemm.n == 768 && k.gemm.k == 768) ++convs;
  }
  CHECK(gemms == 1 + 12 * 8 + 1);
  CHECK(convs == 1);
  const TensorInfo* logits = a.graph.find("logits");
  REQUIRE(logits);
  CHECK(logits->shape.size() == 2);
  CHECK(logits->shape[1].value == 1000);
  // Sizes a ViT cannot have.
  CHECK_THROWS_WITH_AS(parse_hf_config("{" + base + R"(, "patch_size": 15})", "vit"), doctest::Contains("multiple of patch_size"),
                       InputError);
}

TEST_CASE("model_builder: DeiT is ViT with a distillation token, classified beside the class token") {
  // facebook/deit-base-distilled-patch16-224 (DeiTForImageClassificationWithTeacher, 1000
  // labels): 87,338,192 parameters = ViT-Base's patch convolution 590,592, class and
  // distillation tokens 1,536, positions for 196 + 2 tokens 152,064, 12 layers x 7,087,872, the
  // final LayerNorm 1,536, and two classifiers of 769,000. DeiTModel (the pooler instead):
  // 86,390,784; DeiTForImageClassification (the class token's classifier): 86,569,192.
  ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/deit_base_distilled.json");
  CHECK(c.head == "distilled");
  CHECK(c.vit.distillation_token);
  CHECK(c.max_positions == 198);
  CHECK(c.num_labels == 1000);
  const LoadedModel m = build_model(c);
  CHECK(parameters(m) == 87338192);
  c.head = "pooler";
  CHECK(parameters(build_model(c)) == 86390784);
  c.head = "classification";
  CHECK(parameters(build_model(c)) == 86569192);
  // Batch 4: the patch convolution, the 12 layers' six projections and two attention products
  // on 198 tokens, the two classifiers; logits [4, 1000].
  Options o;
  o.dims.batch = 4;
  const Analysis a = prepare(m, o);
  int gemms = 0, scores = 0;
  for (const Kernel& k : a.kernels.kernels) {
    if (k.cls != KernelClass::gemm) continue;
    ++gemms;
    if (k.gemm.batch == 4 * 12 && k.gemm.m == 198 && k.gemm.n == 198 && k.gemm.k == 64) ++scores;
  }
  CHECK(gemms == 1 + 12 * 8 + 2);
  CHECK(scores == 12);
  const TensorInfo* logits = a.graph.find("logits");
  REQUIRE(logits);
  REQUIRE(logits->shape.size() == 2);
  CHECK((logits->shape[0].value == 4 && logits->shape[1].value == 1000));
  // Its positions are for the config's image alone (DeiT interpolates only when asked).
  CHECK_THROWS_WITH_AS(set_image_size(c, 384, 384), doctest::Contains("takes its config's image_size"), InputError);
}

TEST_CASE("model_builder: DINOv2 is ViT with LayerScale, SwiGLU where configured, positions interpolated to the image") {
  // facebook/dinov2-base (Dinov2Model, image_size 518, patch_size 14: 37 x 37 patches):
  // 86,580,480 parameters = the patch convolution 768 x 3 x 14 x 14 + 768 (452,352), the class
  // and mask tokens 1,536, positions for 1,369 + 1 tokens 1,052,160, 12 layers x 7,089,408
  // (ViT-Base's 7,087,872 and two LayerScales of 768), the final LayerNorm 1,536.
  ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/dinov2_base.json");
  CHECK(c.head == "base");
  CHECK((c.vit.layer_scale && c.vit.mask_token && !c.vit.swiglu));
  CHECK(c.ffn == 3072);
  CHECK(c.vit.position_grid == 37);
  const LoadedModel m = build_model(c);
  CHECK(parameters(m) == 86580480);
  CHECK(count_ops(m, "Resize") == 0);  // the image is the table's grid: positions as they are
  Options o;
  o.dims.batch = 2;
  const auto last_state = [&](const LoadedModel& model, int64_t tokens) {
    const Analysis a = prepare(model, o);
    const TensorInfo* out = a.graph.find("last_hidden_state");
    REQUIRE(out);
    REQUIRE(out->shape.size() == 3);
    CHECK((out->shape[0].value == 2 && out->shape[1].value == tokens && out->shape[2].value == 768));
  };
  last_state(m, 1370);
  // The processor's 224 x 224 crop: 16 x 16 patches, the table bicubically resized to them.
  ModelConfig crop = c;
  set_image_size(crop, 224, 224);
  const LoadedModel cropped = build_model(crop);
  CHECK(count_ops(cropped, "Resize") == 1);
  CHECK(parameters(cropped) == 86580480);
  last_state(cropped, 257);
  CHECK_THROWS_WITH_AS(set_image_size(crop, 225, 224), doctest::Contains("multiples of its patch_size"), InputError);
  // Dinov2ForImageClassification: the class token beside the patches' mean, 2 x 768 -> 1000.
  const std::string fields = R"({"model_type": "dinov2", "hidden_size": 768, "num_hidden_layers": 12,
      "num_attention_heads": 12, "image_size": 518, "patch_size": 14)";
  const ModelConfig cls = parse_hf_config(fields + R"(, "architectures": ["Dinov2ForImageClassification"], "num_labels": 1000})", "d");
  CHECK(cls.head == "classification");
  CHECK(parameters(build_model(cls)) == 86580480 + 1536 * 1000 + 1000);
  // facebook/dinov2-giant: 1536 wide, 40 layers, 24 heads, a SwiGLU of (int(6144 x 2 / 3) + 7)
  // // 8 x 8 = 4096 features: weights_in 1536 x 8192 + 8192, weights_out 4096 x 1536 + 1536;
  // 1,136,480,768 parameters (40 layers x 28,336,640, the embeddings 3,012,096, the final
  // LayerNorm 3,072).
  const ModelConfig giant = parse_hf_config(R"({"model_type": "dinov2", "hidden_size": 1536, "num_hidden_layers": 40,
      "num_attention_heads": 24, "mlp_ratio": 4, "image_size": 518, "patch_size": 14, "use_swiglu_ffn": true})", "g");
  CHECK(giant.ffn == 4096);
  CHECK(parameters(build_model(giant)) == 1136480768);
  CHECK_THROWS_WITH_AS(parse_hf_config(fields + R"(, "mlp_ratio": 0})", "d"), doctest::Contains("mlp_ratio"), InputError);
}

TEST_CASE("model_builder: a missing config file or malformed config text is an input error") {
  CHECK_THROWS_AS(read_hf_config(test::source_dir() + "/no/such.json"), InputError);
  CHECK_THROWS_WITH_AS(parse_hf_config("{", "config"), "config: malformed JSON config", InputError);
  CHECK_THROWS_WITH_AS(parse_hf_config("{}", "config"), "config: missing field 'model_type'", InputError);
}

TEST_CASE("model_builder: sizes beyond int32, layer and expert counts no model has are input errors") {
  const std::string gpt2 = R"({"model_type":"gpt2","n_head":2,"vocab_size":10,)";
  CHECK_THROWS_WITH_AS(parse_hf_config(gpt2 + R"("n_layer":1,"n_embd":4611686018427387904})", "c"),
                       "c: field 'n_embd' is beyond 2^31 - 1", InputError);
  CHECK_THROWS_WITH_AS(parse_hf_config(gpt2 + R"("n_layer":1000000000,"n_embd":64})", "c"), "c: more than 10000 layers",
                       InputError);
  CHECK(parse_hf_config(gpt2 + R"("n_layer":10000,"n_embd":64})", "c").layers == 10000);
  const std::string sw = R"({"model_type":"switch_transformers","d_model":64,"num_layers":2,"num_heads":4,"d_kv":16,"d_ff":10,"vocab_size":10,)";
  CHECK_THROWS_WITH_AS(parse_hf_config(sw + R"("num_experts":2000000000,"expert_capacity":4})", "c"),
                       "c: more than 1000000 expert MLPs over all layers", InputError);
  CHECK_THROWS_WITH_AS(parse_hf_config(sw + R"("num_experts":8,"expert_capacity":2000000000})", "c"),
                       "c: expert_capacity beyond 1048576 slots", InputError);
}

TEST_CASE("model_builder: a tensor-parallel degree that does not divide the heads or the MLP is named") {
  const ModelConfig c = parse_hf_config(R"({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
      "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 2, "vocab_size": 1000})",
                                        "llama.json");
  CHECK(config_parallel_note(c, 1).empty());
  CHECK(config_parallel_note(c, 8).empty());
  CHECK(config_parallel_note(c, 16).empty());  // 16 GPUs, 8 KV heads: each replicated twice (vLLM)
  CHECK(config_parallel_note(c, 3) ==
        "tp=3 does not divide llama.json's attention heads 32, KV heads 8 (nor a divisor of tp), intermediate size "
        "14336: Megatron and vLLM refuse that split; predicted with the shards padded");
  CHECK(config_parallel_note(c, 64) == "tp=64 does not divide llama.json's attention heads 32: "
                                       "Megatron and vLLM refuse that split; predicted with the shards padded");
}

TEST_CASE("model_builder: bad configs are input errors naming the file and field") {
  ModelConfig c = read_hf_config(config_path("gpt2_large"));
  c.model_type = "mamba";
  CHECK_THROWS_AS(build_model(c), InputError);
  c = read_hf_config(config_path("switchxl4"));
  CHECK(c.experts == 4);
  CHECK(c.expert_capacity == 64);
  CHECK(c.head_dim == 128);
  CHECK(c.decoder_layers == 24);
}

TEST_CASE("model_builder: the opgraph reader parses GEMM, VEC, nested MEM and AccOps cells") {
  const auto k = parse_traced_kernels(
      "[['Linear', (4096, 1280, 3840)], ['MEM', ((1, 1, 1024, 1024), (1,), (4, 20))], ['VECadd', [1, 3840]]]");
  REQUIRE(k.size() == 3);
  CHECK(traced_key(k[0]) == "Linear 4096,1280,3840");
  CHECK(k[1].kind == "MEM");
  CHECK(k[1].dims.empty());
  CHECK(k[1].shapes == std::vector<std::vector<int64_t>>{{1, 1, 1024, 1024}, {1}, {4, 20}});
  CHECK(k[2].dims == std::vector<int64_t>{1, 3840});
  CHECK(traced_key(k[2], true) == "VECaddu 1,3840");
  CHECK(parse_traced_kernels("[]").empty());
  CHECK(csv_fields("a,\"[(1, 2), (3,)]\",c") == std::vector<std::string>{"a", "[(1, 2), (3,)]", "c"});
}

TEST_CASE("model_builder: a config's JSON text reads as its file does") {
  const std::string path = config_path("bert_large");
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  const ModelConfig a = read_hf_config(path), b = parse_hf_config(text.str(), "config");
  CHECK(b.model_type == a.model_type);
  CHECK(b.layers == a.layers);
  CHECK(b.hidden == a.hidden);
  CHECK(b.heads == a.heads);
  CHECK(b.ffn == a.ffn);
  CHECK(b.vocab == a.vocab);
  CHECK(b.head == a.head);
  CHECK(b.source == "config");
}

TEST_CASE("model_builder: CLIP and SigLIP are their two towers, pooled, projected and compared, or one tower alone") {
  // openai/clip-vit-base-patch32 (CLIPConfig's defaults): 151,277,313 parameters, of which the
  // vision tower (CLIPVisionModel) 87,456,000 and its projection 393,216.
  const ModelConfig clip = parse_hf_config(R"({"model_type": "clip", "architectures": ["CLIPModel"],
      "text_config": {}, "vision_config": {}})", "clip");
  CHECK(clip.head == "contrastive");
  CHECK(clip.projection_dim == 512);
  CHECK(clip.image_size == 0);  // a text tower too: --batch and --seq bind it
  CHECK(parameters(build_model(clip)) == 151277313);
  const std::string vision = R"({"model_type": "clip_vision_model", "architectures": [")";
  CHECK(parameters(build_model(parse_hf_config(vision + R"(CLIPVisionModel"]})", "cv"))) == 87456000);
  const ModelConfig proj = parse_hf_config(vision + R"(CLIPVisionModelWithProjection"]})", "cv");
  CHECK(proj.image_size == 224);
  CHECK(parameters(build_model(proj)) == 87456000 + 393216);
  // SigLIP base/16 at 224 pixels (SiglipConfig's defaults): the vision tower 85,797,120 with its
  // attention-pooling head (probe, in_proj, out_proj, layernorm, MLP) 7,087,104; the text tower
  // (32,000 tokens, 64 positions, its head) 110,271,744; logit_scale and logit_bias.
  const ModelConfig sig = parse_hf_config(R"({"model_type": "siglip", "text_config": {}, "vision_config": {}})", "siglip");
  CHECK(sig.vision.siglip());
  CHECK(sig.projection_dim == 768);
  CHECK(parameters(build_model(sig)) == 85797120 + 7087104 + 110271744 + 2);
  CHECK(parameters(build_model(parse_hf_config(R"({"model_type": "siglip_vision_model"})", "sv"))) == 85797120 + 7087104);
  CHECK(parameters(build_model(parse_hf_config(R"({"model_type": "siglip_vision_model", "vision_use_head": false})", "sv"))) ==
        85797120);

  // CLIP at batch 4, 77 tokens: the text tower's causal layers (six GEMMs each, two attention
  // products over 77 tokens), the image tower's over 50, the two projections and the logits.
  Options o;
  o.dims.batch = 4;
  o.dims.seq = 77;
  const Analysis a = prepare(build_model(clip), o);
  int text_scores = 0, image_scores = 0, logits = 0;
  for (const Kernel& k : a.kernels.kernels) {
    if (k.cls != KernelClass::gemm) continue;
    if (k.gemm.batch == 4 * 8 && k.gemm.m == 77 && k.gemm.n == 77) ++text_scores;
    if (k.gemm.batch == 4 * 12 && k.gemm.m == 50 && k.gemm.n == 50) ++image_scores;
    if (k.gemm.m == 4 && k.gemm.n == 4 && k.gemm.k == 512) ++logits;
  }
  CHECK(text_scores == 12);
  CHECK(image_scores == 12);
  CHECK(logits == 1);
  const TensorInfo* out = a.graph.find("logits_per_text");
  REQUIRE(out);
  REQUIRE(out->shape.size() == 2);
  CHECK(out->shape[0].value == 4);
  CHECK(out->shape[1].value == 4);
  // Their text towers alone: Stable Diffusion 1.x's text encoder (CLIPTextModel, ViT-L/14's text
  // tower) 123,060,480 parameters, SDXL's second (CLIPTextModelWithProjection, OpenCLIP bigG's)
  // 694,659,840.
  CHECK(parameters(build_model(parse_hf_config(R"({"model_type": "clip_text_model", "architectures": ["CLIPTextModel"],
      "hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12, "projection_dim": 768})", "ct"))) ==
        123060480);
  const ModelConfig bigg = parse_hf_config(R"({"model_type": "clip_text_model", "architectures":
      ["CLIPTextModelWithProjection"], "hidden_size": 1280, "intermediate_size": 5120, "num_attention_heads": 20,
      "num_hidden_layers": 32, "projection_dim": 1280, "hidden_act": "gelu"})", "ct");
  CHECK(bigg.head == "projection");
  CHECK(parameters(build_model(bigg)) == 694659840);
  CHECK(parameters(build_model(parse_hf_config(R"({"model_type": "siglip_text_model"})", "st"))) == 110271744);
  // SigLIP's text projection must land in the image embedding's space.
  CHECK_THROWS_WITH_AS(parse_hf_config(R"({"model_type": "siglip", "text_config": {"projection_size": 512}})", "s"),
                       doctest::Contains("projection_size (512) must equal the vision hidden size (768)"), InputError);
}
