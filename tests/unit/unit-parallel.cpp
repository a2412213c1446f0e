// unit-parallel.cpp - schedule arithmetic, link model, tensor-parallel sharding, iteration.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "neusight/neusight.h"
#include "neusight/parallel.h"
#include "lowering_graph.h"
#include "roofline_options.h"
#include "test_util.h"

using namespace neusight;

TEST_CASE("parallel: bubble fraction (pp-1)/(m+pp-1)") {
  CHECK(bubble_fraction(4, 4) == doctest::Approx(3.0 / 7.0));
  CHECK(bubble_fraction(4, 1) == doctest::Approx(0.75));
  CHECK(bubble_fraction(1, 8) == doctest::Approx(0.0));
  CHECK(bubble_fraction(2, 8) == doctest::Approx(1.0 / 9.0));
}

TEST_CASE("parallel: GPipe and 1F1B on equal stages take (m+pp-1)(F+B)") {
  // pp=4, m=4, F=1, B=2: the last backward of stage 0 ends at 7 * 3 = 21; stage 0 computes
  // 4 * 3 = 12 of it, so the bubble is 9 = 3/7 of the span.
  const std::vector<double> f(4, 1.0), b(4, 2.0);
  for (auto sched : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b}) {
    CAPTURE(schedule_name(sched));
    const PipelineTiming t = simulate_pipeline(f, b, 4, sched, 0);
    CHECK(t.span_ms == doctest::Approx(21));
    CHECK(t.bubble_ms == doctest::Approx(9));
    CHECK(t.bubble_ms / t.span_ms == doctest::Approx(bubble_fraction(4, 4)));
  }
}

TEST_CASE("parallel: one microbatch runs the stages one after another, two hops per boundary") {
  const std::vector<double> f = {1, 2, 3, 4}, b = {2, 4, 6, 8};
  const PipelineTiming t = simulate_pipeline(f, b, 1, PipelineSchedule::one_f_one_b, 0.5);
  CHECK(t.span_ms == doctest::Approx(10 + 20 + 2 * 3 * 0.5));
  CHECK(t.stage_end_ms[0] == doctest::Approx(33));
}

TEST_CASE("parallel: GPipe with send/recv hops, worked by hand") {
  // pp=2, m=2, F=B=1, hop 0.5. Stage 1: F0 1.5-2.5, F1 2.5-3.5, B0 3.5-4.5, B1 4.5-5.5.
  // Stage 0: B0 ready 5.0 -> 5-6, B1 ready 6.0 -> 6-7.
  const PipelineTiming t = simulate_pipeline({1, 1}, {1, 1}, 2, PipelineSchedule::gpipe, 0.5);
  CHECK(t.span_ms == doctest::Approx(7));
  CHECK(t.stage_end_ms[1] == doctest::Approx(5.5));
  // 1F1B: stage 1 runs F0 B0 F1 B1: 1.5-2.5, 2.5-3.5, 3.5-4.5 (F1 ready at 2.5), 4.5-5.5;
  // stage 0: F0 0-1, F1 1-2, B0 ready 4.0 -> 4-5, B1 ready 6.0 -> 6-7.
  const PipelineTiming u = simulate_pipeline({1, 1}, {1, 1}, 2, PipelineSchedule::one_f_one_b, 0.5);
  CHECK(u.span_ms == doctest::Approx(7));
}

TEST_CASE("parallel: the interleaved schedule shrinks the bubble by the model chunks a GPU holds") {
  // One chunk a GPU is 1F1B.
  const std::vector<double> f = {1, 2, 3, 4}, b = {2, 4, 6, 8};
  for (int m : {4, 8}) {
    CAPTURE(m);
    const PipelineTiming one = simulate_pipeline(f, b, m, PipelineSchedule::one_f_one_b, 0.25);
    const PipelineTiming il = simulate_interleaved(f, b, 4, m, 0.25);
    CHECK(il.span_ms == doctest::Approx(one.span_ms));
    for (size_t d = 0; d < 4; ++d) CHECK(il.stage_end_ms[d] == doctest::Approx(one.stage_end_ms[d]));
  }
  // Equal chunks (F = 1, B = 2 each), pp = 4: the bubble is (pp - 1) chunk steps, (pp-1)/(m vp + pp - 1)
  // of the span, as Megatron-LM's paper gives it.
  for (int vp : {1, 2, 4}) {
    CAPTURE(vp);
    const std::vector<double> cf(static_cast<size_t>(4 * vp), 1.0), cb(static_cast<size_t>(4 * vp), 2.0);
    const PipelineTiming t = simulate_interleaved(cf, cb, 4, 8, 0);
    CHECK(t.bubble_ms / t.span_ms == doctest::Approx(3.0 / (8.0 * vp + 3.0)));
    CHECK(t.stage_busy_ms[0] == doctest::Approx(8 * vp * 3.0));
  }
  // GPU 0 holds its warm-up's chunks and one more: (pp - 1) x 2 + (vp - 1) x pp + 1.
  CHECK(interleaved_in_flight(0, 4, 2, 8) == 11);
  CHECK(interleaved_in_flight(3, 4, 2, 8) == 5);
  CHECK(interleaved_in_flight(0, 4, 2, 1) == 2);
  CHECK_THROWS_AS(parallel_micro_batch(parse_parallel("pp=4,microbatches=6,vp=2"), Mode::training, 12), InputError);
  CHECK_THROWS_AS(parallel_micro_batch(parse_parallel("pp=4,microbatches=8,vp=2,schedule=gpipe"), Mode::training, 8), InputError);
  CHECK_THROWS_AS(parallel_micro_batch(parse_parallel("dp=2,vp=2"), Mode::training, 8), InputError);
  CHECK(parallel_micro_batch(parse_parallel("pp=4,microbatches=8,vp=2"), Mode::training, 16) == 2);
}

TEST_CASE("parallel: interleaved stages on the example: chunks placed round-robin, a GPU's memory its chunks'") {
  LoadedModel m = load_model(test::example_model());
  const Gpu gpu = GpuDatabase::builtin().resolve("a100-40gb");
  const Report one = analyze(m, gpu, test::roofline_options(8, 128, Mode::training, "pp=2,microbatches=4"));
  const Report two = analyze(m, gpu, test::roofline_options(8, 128, Mode::training, "pp=2,microbatches=4,vp=2"));
  REQUIRE(one.parallel);
  REQUIRE(two.parallel);
  const auto& st = two.parallel->stages;
  REQUIRE(st.size() == 4);
  for (size_t s = 0; s < 4; ++s) CHECK(st[s].gpu == static_cast<int>(s % 2));
  CHECK(two.parallel->bubble_fraction < one.parallel->bubble_fraction);
  double gpu0 = 0;
  for (const auto& s : st)
    if (s.gpu == 0) gpu0 += s.total_gb;
  CHECK(two.parallel->peak_memory_gb >= gpu0 - 1e-9);
  CHECK(two.parallel->config.virtual_stages == 2);
}

TEST_CASE("parallel: gradient all-reduce overlaps the backward pass bucket by bucket") {
  // Four 1 ms backward steps each readying 10 bytes; 20-byte buckets: issued at t=2 and t=4.
  const std::vector<double> steps(4, 1.0), grads(4, 10.0);
  const auto overlap = [&](double bucket, const std::function<double(double)>& allreduce) {
    return overlap_sharded(steps, {}, grads, 0, bucket, allreduce, allreduce);
  };
  OverlapTiming o = overlap(20, [](double) { return 1.5; });
  CHECK(o.buckets == 2);
  CHECK(o.comm_ms == doctest::Approx(3));
  CHECK(o.end_ms == doctest::Approx(5.5));   // 2-3.5, 4-5.5
  CHECK(o.exposed_ms == doctest::Approx(1.5));
  CHECK(o.gather_ms == 0);  // no parameters to gather
  // A slow link queues the buckets: 2-5, 5-8 -> 4 ms exposed.
  o = overlap(20, [](double) { return 3.0; });
  CHECK(o.exposed_ms == doctest::Approx(4));
  // Everything in one bucket at the end: nothing overlaps.
  o = overlap(1e9, [](double b) { return b / 10; });
  CHECK(o.buckets == 1);
  CHECK(o.exposed_ms == doctest::Approx(4));
}

TEST_CASE("parallel: ZeRO-3's gathers run a bucket ahead of the steps that need them, worked by hand") {
  // Four 1 ms steps; steps 0 and 2 each need 10 bytes, one bucket each (10-byte buckets).
  const std::vector<double> steps(4, 1.0), need = {10, 0, 10, 0};
  const std::vector<double> none;
  const auto free_reduce = [](double) { return 0.0; };
  // Gathers of 0.5 ms: bucket 0 0-0.5, step 0 waits to 0.5 and issues bucket 1 (0.5-1.0),
  // which is in before step 2 starts at 2.5: 0.5 ms exposed.
  OverlapTiming o = overlap_sharded(steps, need, none, 10, 1e9, [](double) { return 0.5; }, free_reduce);
  CHECK(o.gather_ms == doctest::Approx(1.0));
  CHECK(o.comm_ms == doctest::Approx(1.0));
  CHECK(o.exposed_ms == doctest::Approx(0.5));
  CHECK(o.live_gather_bytes == doctest::Approx(20));
  // Gathers of 3 ms: bucket 0 0-3, step 0 3-4, bucket 1 3-6, step 1 4-5, step 2 waits to 6,
  // ends 8: 4 ms exposed.
  o = overlap_sharded(steps, need, none, 10, 1e9, [](double) { return 3.0; }, free_reduce);
  CHECK(o.end_ms == doctest::Approx(8));
  CHECK(o.exposed_ms == doctest::Approx(4));
  // One bucket for both (20 bytes a bucket): gathered once before step 0.
  o = overlap_sharded(steps, need, none, 20, 1e9, [](double b) { return b / 10; }, free_reduce);
  CHECK(o.gather_ms == doctest::Approx(2));
  CHECK(o.exposed_ms == doctest::Approx(2));
  CHECK(o.live_gather_bytes == doctest::Approx(20));
  // Gradients share the link: step 1 readies 10 bytes at 2.5, reduced 2.5-3.5 under steps 2
  // and 3; only the first gather's 0.5 ms is exposed.
  o = overlap_sharded(steps, need, {0, 10, 0, 0}, 10, 10, [](double) { return 0.5; }, [](double) { return 1.0; });
  CHECK(o.buckets == 1);
  CHECK(o.comm_ms == doctest::Approx(2.0));
  CHECK(o.exposed_ms == doctest::Approx(0.5));
}

TEST_CASE("parallel: ring all-reduce and point-to-point costs") {
  Link l;
  l.spec_gbps = 100;  // x 0.8 = 80 GB/s
  // 2(n-1)/n = 1.5 of 1 GB at 80 GB/s = 18.75 ms, plus 6 steps of 5 us.
  CHECK(ring_allreduce_ms(1e9, 4, l) == doctest::Approx(18.75 + 6 * kLinkStepLatencyUs * 1e-3));
  CHECK(ring_allreduce_ms(1e9, 1, l) == 0);
  CHECK(p2p_ms(8e6, l) == doctest::Approx(0.1 + kLinkStepLatencyUs * 1e-3));
  Gpu g;
  g.name = "x";
  g.nvlink = "nvlink3";
  g.nvlink_gbps = 300;
  g.pcie_gbps = 32;
  CHECK(link_for(g).spec_gbps == 300);
  CHECK(link_for(g, 50).spec_gbps == 50);
  CHECK(link_for(g, 0, 8).spec_gbps == 300);  // no domain stated: the link joins any number
  // Bridged pairs: two GPUs talk over NVLink, four or more over PCIe.
  g.nvlink_domain = 2;
  CHECK(link_for(g, 0, 2).spec_gbps == 300);
  CHECK(link_for(g, 0, 4).kind == "pcie");
  CHECK(link_for(g, 0, 4).spec_gbps == 32);
  CHECK(link_for(g, 50, 4).spec_gbps == 50);  // an override is the user's word
  g.nvlink_gbps = 0;
  CHECK(link_for(g).kind == "pcie");
  g.pcie_gbps = 0;
  CHECK_THROWS_AS(link_for(g), InputError);
}

TEST_CASE("parallel: a ring all-gather or reduce-scatter is half a ring all-reduce") {
  Link l;
  l.spec_gbps = 100;
  for (int n : {2, 4, 8}) {
    CAPTURE(n);
    CHECK(ring_allgather_ms(1e9, n, l) == doctest::Approx(ring_allreduce_ms(1e9, n, l) / 2));
    CHECK(ring_reduce_scatter_ms(1e9, n, l) == doctest::Approx(ring_allgather_ms(1e9, n, l)));
  }
  CHECK(ring_allgather_ms(1e9, 1, l) == 0);
}

TEST_CASE("parallel: a data-parallel group across NVLink domains reduces within each domain first") {
  Link nv, pcie;
  nv.spec_gbps = 450;
  pcie.spec_gbps = 64;
  const double b = 1e9;
  CHECK(hierarchical_allreduce_ms(b, 16, 8, nv, pcie) ==
        doctest::Approx(2 * ring_reduce_scatter_ms(b, 8, nv) + ring_allreduce_ms(b / 8, 2, pcie)));
  CHECK(hierarchical_reduce_scatter_ms(b, 16, 8, nv, pcie) ==
        doctest::Approx(ring_reduce_scatter_ms(b, 8, nv) + ring_reduce_scatter_ms(b / 8, 2, pcie)));
  CHECK(hierarchical_allreduce_ms(b, 16, 1, nv, pcie) == doctest::Approx(ring_allreduce_ms(b, 16, pcie)));
  CHECK(hierarchical_allreduce_ms(b, 8, 8, nv, pcie) == doctest::Approx(ring_allreduce_ms(b, 8, nv)));
  CHECK(hierarchical_allreduce_ms(b, 16, 8, nv, pcie) < 0.3 * ring_allreduce_ms(b, 16, pcie));
  // On H100s (8-GPU NVLink domains): the data-parallel peers a domain holds are 8 / tp.
  LoadedModel m = load_model(test::example_model());
  const Gpu gpu = GpuDatabase::builtin().resolve("h100");
  auto plan = [&](const std::string& spec, int64_t batch) {
    const Report r = analyze(m, gpu, test::roofline_options(batch, 128, Mode::training, spec));
    REQUIRE(r.parallel);
    return *r.parallel;
  };
  const ParallelReport flat8 = plan("dp=8", 8), two_nodes = plan("dp=16", 16), tp2 = plan("dp=8,tp=2", 8),
                       tp8 = plan("dp=2,tp=8", 2);
  CHECK(flat8.dp_domain_gpus == 1);  // one domain: NVLink throughout
  CHECK(two_nodes.dp_domain_gpus == 8);
  CHECK(two_nodes.dp_intra_link.kind == flat8.dp_link.kind);
  CHECK(two_nodes.dp_link.kind == "pcie");
  CHECK(tp2.dp_domain_gpus == 4);
  CHECK(tp8.dp_domain_gpus == 1);  // each domain one tensor-parallel group: every peer is across
  Options o = test::roofline_options(16, 128, Mode::training, "dp=16");
  o.parallel.link_gbps = 100;  // --link-bw: one link for all
  CHECK(analyze(m, gpu, o).parallel->dp_domain_gpus == 1);
}

TEST_CASE("parallel: the all-reduce the libraries pick is the fastest form the link allows") {
  Link nv;
  nv.kind = "nvlink4";
  nv.spec_gbps = 100;  // x 0.8 = 80 GB/s
  Link pcie = nv;
  pcie.kind = "pcie";
  const double step = kLinkStepLatencyUs * 1e-3;
  // 16 KB among 8 GPUs: latency-bound, one step of the one-shot beats 14 of the ring.
  CHECK(allreduce_ms(16384, 8, nv) == doctest::Approx(7 * 16384 / 80e9 * 1e3 + step));
  // 1 GB: bandwidth-bound; the two-shot moves the ring's bytes in 2 steps instead of 14.
  CHECK(allreduce_ms(1e9, 8, nv) == doctest::Approx(1.75 * 1e9 / 80e9 * 1e3 + 2 * step));
  // Never slower than the ring, and the ring alone over PCIe.
  for (double bytes : {1e3, 1e5, 1e7, 1e9})
    for (int n : {2, 4, 8}) {
      CHECK(allreduce_ms(bytes, n, nv) <= ring_allreduce_ms(bytes, n, nv));
      CHECK(allreduce_ms(bytes, n, pcie) == ring_allreduce_ms(bytes, n, pcie));
    }
  CHECK(allreduce_ms(1e6, 1, nv) == 0);
}

TEST_CASE("parallel: inference takes tensor parallelism alone, a generation pipeline stages too") {
  CHECK_NOTHROW(check_inference_parallel(parse_parallel("tp=8")));
  CHECK_THROWS_AS(check_inference_parallel(parse_parallel("dp=2")), InputError);
  CHECK_NOTHROW(check_inference_parallel(parse_parallel("tp=2,pp=2")));
  CHECK_NOTHROW(check_inference_parallel(parse_parallel("pp=2,microbatches=4")));
  CHECK_THROWS_AS(check_inference_parallel(parse_parallel("microbatches=4")), InputError);  // no stages to fill
  CHECK_NOTHROW(check_inference_parallel(parse_parallel("tp=2,pp=2"), true));
  CHECK_THROWS_AS(check_inference_parallel(parse_parallel("pp=2,dp=2"), true), InputError);
  CHECK_THROWS_AS(check_inference_parallel(parse_parallel("pp=2,microbatches=4"), true), InputError);  // vLLM's own
  // A forward pass's microbatches: as given (dividing the batch), else min(pp, batch) of
  // ceil(batch / min(pp, batch)) samples, as few as that size needs.
  CHECK(inference_microbatches(parse_parallel("pp=4"), 8) == 4);
  CHECK(inference_microbatches(parse_parallel("pp=4"), 2) == 2);
  CHECK(inference_microbatches(parse_parallel("pp=4"), 6) == 3);  // 4 of 2 samples would leave one empty
  CHECK(inference_microbatches(parse_parallel("pp=3"), 8) == 3);  // 3, 3 and 2 samples
  CHECK(inference_microbatches(parse_parallel("pp=2,microbatches=8"), 8) == 8);
  CHECK(inference_microbatches(parse_parallel("tp=2"), 8) == 1);
  CHECK_THROWS_AS(inference_microbatches(parse_parallel("pp=2,microbatches=3"), 8), InputError);
  CHECK(parse_parallel("pp=2,pp_split=even").even_layers);
  CHECK_FALSE(parse_parallel("pp=2,pp_split=balanced").even_layers);
  CHECK_THROWS_AS(check_inference_parallel(parse_parallel("pp_split=even")), InputError);
  CHECK_THROWS_AS(check_inference_parallel(parse_parallel("tp=2,microbatches=2")), InputError);
  // Experts over ep of the tp GPUs: ep divides tp (training: ep of the dp GPUs, below).
  CHECK_NOTHROW(check_inference_parallel(parse_parallel("tp=8,ep=8")));
  CHECK_NOTHROW(check_inference_parallel(parse_parallel("ep=2,tp=8")));
  CHECK_THROWS_AS(check_inference_parallel(parse_parallel("tp=8,ep=3")), InputError);
  CHECK_THROWS_AS(check_inference_parallel(parse_parallel("ep=2")), InputError);
  // Training spreads the experts over ep of the dp GPUs: ep divides dp.
  CHECK(parallel_micro_batch(parse_parallel("dp=4,ep=2"), Mode::training, 8) == 2);
  CHECK_THROWS_AS(parallel_micro_batch(parse_parallel("dp=2,ep=4"), Mode::training, 8), InputError);
}

TEST_CASE("parallel: pp_split=even cuts vLLM's even layer split, the remainder before the last stage") {
  Graph named;
  for (const char* n : {"embed/Gather", "model.layers.0.attn/MatMul", "model.layers.0/Add", "transformer.h.1.mlp/MatMul",
                        "encoder.layer.2/Add", "blocks_3/Mul", "lm_head/MatMul", "h.4", "layers10x"}) {
    Node node;
    node.name = n;
    named.nodes.push_back(node);
  }
  CHECK(node_layers(named) == std::vector<int>{-1, 0, 0, 1, 2, 3, -1, 4, -1});
  // A 10-layer Llama over 4 stages: 2, 3, 3, 2 layers (vLLM's get_pp_indices: 10 / 4 = 2 each,
  // the remainder 2 to the stages before the last).
  ModelConfig c = parse_hf_config(R"({"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
      "num_attention_heads": 8, "num_key_value_heads": 2, "num_hidden_layers": 10, "vocab_size": 1000})", "llama");
  const LoadedModel m = build_model(c);
  Options o;
  o.dims.batch = 1;
  o.dims.seq = 64;
  const Analysis a = prepare(m, o);
  const std::vector<double> node_ms(a.graph.nodes.size(), 1.0);
  const InferenceStages st = inference_stages(a.graph, a.kernels.kernels, node_ms, 4, Link{}, true);
  const std::vector<int> layer = node_layers(a.graph);
  REQUIRE(st.cuts.size() == 5);
  CHECK(st.cuts.front() == 0);
  CHECK(st.cuts.back() == static_cast<int>(a.graph.nodes.size()));
  const int first_layer[] = {0, 2, 5, 8};
  for (int s = 1; s < 4; ++s) {
    CHECK(layer[static_cast<size_t>(st.cuts[static_cast<size_t>(s)])] == first_layer[s]);
    CHECK(layer[static_cast<size_t>(st.cuts[static_cast<size_t>(s)] - 1)] < first_layer[s]);
  }
  CHECK_THROWS_AS(inference_stages(a.graph, a.kernels.kernels, node_ms, 11, Link{}, true), InputError);
}

TEST_CASE("parallel: a serving pipeline's prefill and decode round, worked by hand") {
  // Stages of 3 and 5 ms, a send of 1 ms. Two microbatches: the prefill's second one leaves
  // the first stage at 6 and the second at 6 + 1 + 5 = 12 (the first one's 3 + 1 + 5 = 9 ends
  // before), so 3 + 5 + 1 + 5 = 14; a decode round is one token's 8 ms and two sends (to the
  // second stage, back to the first) against the slower stage serving both microbatches, 10.
  CHECK(pipelined_prefill_ms({3, 5}, 1, 2) == doctest::Approx(14));
  CHECK(pipelined_step_ms({3, 5}, 1, 2) == doctest::Approx(10));
  CHECK(pipelined_step_ms({3, 5}, 0.5, 2) == doctest::Approx(10));  // the slower stage's 2 x 5
  CHECK(pipelined_step_ms({3, 5}, 2, 2) == doctest::Approx(12));    // one token's 8 + 2 x 2
  // One microbatch (a batch of one): the stages one after another, the pipeline a cost.
  CHECK(pipelined_prefill_ms({3, 5}, 1, 1) == doctest::Approx(9));
  CHECK(pipelined_step_ms({3, 5}, 1, 1) == doctest::Approx(10));
  // Four equal stages, four microbatches: the fill (pp - 1) and the microbatches.
  CHECK(pipelined_prefill_ms({2, 2, 2, 2}, 0, 4) == doctest::Approx(14));
  CHECK(pipelined_step_ms({2, 2, 2, 2}, 0, 4) == doctest::Approx(8));
  // One stage: no sends.
  CHECK(pipelined_step_ms({7}, 3, 1) == doctest::Approx(7));
  CHECK(pipelined_prefill_ms({7}, 3, 1) == doctest::Approx(7));
}

TEST_CASE("parallel: a tensor-parallel all-reduce carries the interval of the link's efficiency") {
  Kernel ar;
  ar.cls = KernelClass::collective;
  ar.bytes = 64.0 * 1024 * 1024;
  std::vector<Prediction> preds(1);
  Link link;
  link.kind = "nvlink4";
  link.spec_gbps = 450;
  time_tensor_parallel_collectives({ar}, preds, 8, link);
  Link fast = link, slow = link;
  fast.efficiency = kLinkEfficiencyHigh;
  slow.efficiency = kLinkEfficiencyLow;
  CHECK(preds[0].latency_ms == doctest::Approx(allreduce_ms(ar.bytes, 8, link)));
  CHECK(preds[0].low_ms() == doctest::Approx(allreduce_ms(ar.bytes, 8, fast)));
  CHECK(preds[0].high_ms() == doctest::Approx(allreduce_ms(ar.bytes, 8, slow)));
  CHECK(preds[0].low_ms() < preds[0].latency_ms);
  CHECK(preds[0].high_ms() > preds[0].latency_ms);
}

TEST_CASE("parallel: expected maxima of the expert placement") {
  CHECK(expected_max_standard_normal(1) == doctest::Approx(0).epsilon(1e-9));
  CHECK(expected_max_standard_normal(2) == doctest::Approx(0.5641896).epsilon(1e-5));  // 1 / sqrt(pi)
  CHECK(expected_max_standard_normal(3) == doctest::Approx(0.8462844).epsilon(1e-5));  // 3 / (2 sqrt(pi))
  CHECK(expected_max_standard_normal(8) == doctest::Approx(1.4236003).epsilon(1e-5));
  // One trial: the maximum of n Bernoulli(p) is 1 - (1 - p)^n.
  CHECK(expected_max_binomial(1, 0.3, 4) == doctest::Approx(1 - std::pow(0.7, 4)));
  CHECK(expected_max_binomial(5, 0.4, 1) == doctest::Approx(2.0));  // one variable: its mean
  CHECK(expected_max_binomial(6, 1.0, 3) == doctest::Approx(6.0));
  CHECK(expected_max_binomial(6, 0.0, 3) == 0);
  // Two Binomial(2, 1/2): P(max = 0) = 1/16, P(max <= 1) = 9/16: E = 15/16 + 7/16.
  CHECK(expected_max_binomial(2, 0.5, 2) == doctest::Approx(22.0 / 16.0));
  // The busiest GPU carries at least its share and at most everything; one GPU is the lowering's
  // mixture; many tokens balance the load.
  for (int64_t experts : {8, 64, 256})
    for (int64_t k : {1, 2, 8})
      for (double tokens : {1.0, 4.0, 64.0, 4096.0})
        for (int gpus : {2, 4, 8}) {
          CAPTURE(experts);
          CAPTURE(k);
          CAPTURE(tokens);
          CAPTURE(gpus);
          const ExpertLoad one = expert_parallel_load(tokens, experts, k, 1);
          const ExpertLoad busiest = expert_parallel_load(tokens, experts, k, gpus);
          CHECK(one.reached == doctest::Approx(moe_experts_reached(tokens, experts, k)));
          CHECK(busiest.reached >= one.reached / gpus * (1 - 1e-9));
          CHECK(busiest.reached <= double((experts + gpus - 1) / gpus) + 1e-9);
          CHECK(busiest.routed >= one.routed / gpus * (1 - 1e-9));
          CHECK(busiest.routed <= one.routed * (1 + 1e-9));
          CHECK(busiest.routed >= busiest.reached * (1 - 1e-9));
        }
  CHECK(expert_parallel_load(1e6, 64, 2, 8).routed / (1e6 * 2 / 8) < 1.01);
  CHECK(expert_parallel_load(1e6, 64, 2, 8).reached == doctest::Approx(8));
}

TEST_CASE("parallel: --parallel spec parsing") {
  ParallelConfig c = parse_parallel("dp=2,tp=4,pp=3,microbatches=8,schedule=gpipe");
  CHECK(c.dp == 2);
  CHECK(c.tp == 4);
  CHECK(c.pp == 3);
  CHECK(c.microbatches == 8);
  CHECK(c.schedule == PipelineSchedule::gpipe);
  CHECK(c.gpus() == 24);
  c = parse_parallel("tp=2");
  CHECK(c.dp == 1);
  CHECK(c.microbatches == 1);
  CHECK(c.schedule == PipelineSchedule::one_f_one_b);
  CHECK(c.zero == 0);
  CHECK(parse_parallel("dp=8,zero=3").zero == 3);
  CHECK(parallel_micro_batch(parse_parallel("dp=2,pp=2,zero=1"), Mode::training, 8) == 4);
  CHECK_THROWS_AS(parallel_micro_batch(parse_parallel("dp=2,pp=2,zero=2"), Mode::training, 8), InputError);
  CHECK_THROWS_AS(check_inference_parallel(parse_parallel("tp=2,zero=1")), InputError);
  CHECK_THROWS_AS(check_inference_parallel(parse_parallel("tp=2,sp=1")), InputError);
  CHECK_FALSE(parse_parallel("tp=2,sp=0").sequence_parallel);
  for (const char* bad : {"", "dp=0", "dp=x", "dp=2,foo=1", "dp", "schedule=zigzag", "tp=-1", "pp=2.5", "zero=4", "zero=-1",
                          "zero=", "zero=12", "sp=2", "sp=yes"})
    CHECK_THROWS_AS(parse_parallel(bad), InputError);
  CHECK(parallel_micro_batch(parse_parallel("dp=2,microbatches=2"), Mode::training, 8) == 2);
  CHECK_THROWS_AS(parallel_micro_batch(parse_parallel("dp=3"), Mode::training, 8), InputError);
  CHECK_THROWS_AS(parallel_micro_batch(parse_parallel("dp=2"), Mode::inference, 8), InputError);
  CHECK_THROWS_AS(parallel_micro_batch(parse_parallel("dp=2"), Mode::training, -1), InputError);
}

namespace {

Analysis example_training(int64_t batch, const ParallelConfig& pc) {
  LoadedModel m = load_model(test::example_model());
  Options o;
  o.dims.batch = batch;
  o.dims.seq = 128;
  o.mode = Mode::training;
  o.parallel = pc;
  return prepare(m, o);
}

}  // namespace

TEST_CASE("parallel: Megatron roles and sharded kernels on GPT-2 small (12 layers)") {
  LoadedModel m = load_model(test::example_model());
  const Graph& g = m.model.graph;
  const auto roles = tensor_parallel_roles(g, 4);
  std::map<std::string, TpRole> by_name;
  for (size_t i = 0; i < g.nodes.size(); ++i) by_name[g.nodes[i].name] = roles[i];
  CHECK(by_name.at("transformer.h.0.attn.c_attn/MatMul") == TpRole::column);
  CHECK(by_name.at("transformer.h.0.attn.c_proj/MatMul") == TpRole::row);
  CHECK(by_name.at("transformer.h.5.mlp.c_fc/MatMul") == TpRole::column);
  CHECK(by_name.at("transformer.h.5.mlp.c_proj/MatMul") == TpRole::row);
  CHECK(by_name.at("transformer.h.0.attn/attn/Softmax") == TpRole::sharded);
  CHECK(by_name.at("transformer.h.0.ln_1/LayerNormalization") == TpRole::replicated);
  CHECK(by_name.at("lm_head/MatMul") == TpRole::column);
  CHECK(by_name.at("transformer.wte/Gather") == TpRole::vocab_embedding);
  CHECK(by_name.at("transformer.wpe/Gather") == TpRole::replicated);

  ParallelConfig one = parse_parallel("tp=1");
  ParallelConfig four = parse_parallel("tp=4");
  const Analysis a1 = example_training(2, one), a4 = example_training(2, four);
  // Every GEMM of GPT-2 is split (QKV/fc columns, proj rows, attention heads, vocabulary
  // 50257 padded to 4 x 12565).
  CHECK(test::gemm_flops(a4.kernels, Phase::forward) == doctest::Approx(test::gemm_flops(a1.kernels, Phase::forward) / 4).epsilon(1e-3));
  CHECK(test::gemm_flops(a4.kernels, Phase::backward) == doctest::Approx(test::gemm_flops(a1.kernels, Phase::backward) / 4).epsilon(1e-3));
  int fwd_ar = 0, bwd_ar = 0;
  for (const auto& k : a4.kernels.kernels)
    if (k.cls == KernelClass::collective) {
      (k.phase == Phase::forward ? fwd_ar : bwd_ar)++;
      CHECK(k.bytes == doctest::Approx(2.0 * 128 * 768 * 4));  // one residual-stream tensor
    }
  CHECK(fwd_ar == 2 * 12 + 1);  // attention and MLP per layer, vocabulary-parallel embedding
  CHECK(bwd_ar == 2 * 12 + 1);  // QKV and fc input gradients per layer, LM head
}

TEST_CASE("parallel: iteration on the example: DP overlap, PP stages, memory") {
  const Gpu gpu = GpuDatabase::builtin().resolve("a100-40gb");
  LoadedModel m = load_model(test::example_model());
  Options o = test::roofline_options(8, 128, Mode::training, "dp=2");
  const Report dp = analyze(m, gpu, o);
  REQUIRE(dp.parallel);
  CHECK(dp.parallel->micro_batch == 4);
  CHECK(dp.parallel->dp_buckets >= 2);
  CHECK(dp.parallel->dp_exposed_ms > 0);
  CHECK(dp.parallel->dp_exposed_ms < dp.parallel->dp_comm_ms);  // most of it hides under the backward
  CHECK(dp.e2e_latency_ms == doctest::Approx(dp.parallel->iteration_ms));
  CHECK(dp.e2e_latency_ms == doctest::Approx(dp.forward_ms + dp.backward_ms + dp.update_ms + dp.parallel->dp_exposed_ms));

  o.parallel = parse_parallel("pp=2,microbatches=4,schedule=gpipe");
  o.optimizer = Optimizer::adam;
  const Report pp = analyze(m, gpu, o);
  REQUIRE(pp.parallel);
  REQUIRE(pp.parallel->stages.size() == 2);
  // Stages are cut where only the residual stream crosses: batch 2 x 128 x 768 fp32.
  CHECK(pp.parallel->stages[0].send_bytes == doctest::Approx(2.0 * 128 * 768 * 4));
  const auto& s = pp.parallel->stages;
  CHECK(s[0].forward_ms + s[0].backward_ms == doctest::Approx(s[1].forward_ms + s[1].backward_ms).epsilon(0.25));
  CHECK(pp.parallel->bubble_fraction > 0);
  CHECK(pp.parallel->bubble_fraction < bubble_fraction(2, 4) + 0.1);
  CHECK(pp.parallel->pp_comm_ms > 0);
  // Memory: 124M parameters (+ untied LM head) at fp32, each stage about half.
  const double params = s[0].params + s[1].params;
  CHECK(params > 124e6);
  CHECK(params < 170e6);
  CHECK(s[0].weights_gb == doctest::Approx(s[0].params * 4 / (1024.0 * 1024 * 1024)));
  CHECK(s[0].optimizer_gb == doctest::Approx(2 * s[0].weights_gb));  // Adam's two FP32 moments
  CHECK(pp.parallel->peak_memory_gb < gpu.mem_gb);
  CHECK(pp.warnings.empty());
  CHECK(dp.parallel->stages[0].optimizer_gb == 0);  // plain SGD (the default) keeps no state
}

TEST_CASE("parallel: ZeRO stages shard the optimizer state, then the gradients, then the parameters over dp") {
  const Gpu gpu = GpuDatabase::builtin().resolve("a100-40gb");
  LoadedModel m = load_model(test::example_model());
  std::vector<Report> z;
  for (int stage = 0; stage <= 3; ++stage) {
    Options o = test::roofline_options(8, 128, Mode::training, "dp=4,microbatches=2,zero=" + std::to_string(stage));
    o.optimizer = Optimizer::adam;
    z.push_back(analyze(m, gpu, o));
    REQUIRE(z.back().parallel);
    CHECK(z.back().parallel->config.zero == stage);
  }
  const auto mem = [&](int stage) { return z[static_cast<size_t>(stage)].parallel->stages[0]; };
  const double bucket = 25.0 / 1024;  // GiB: the gradient bucket being reduced
  CHECK(mem(1).optimizer_gb == doctest::Approx(mem(0).optimizer_gb / 4));
  CHECK(mem(1).gradients_gb == doctest::Approx(mem(0).gradients_gb));
  CHECK(mem(2).gradients_gb == doctest::Approx(mem(0).gradients_gb / 4 + bucket));
  CHECK(mem(2).weights_gb == doctest::Approx(mem(0).weights_gb));
  // Stage 3 holds a quarter of the weights and the buckets gathered at once (50M-element
  // buckets: GPT-2 small's 124M parameters and its LM head in a few).
  CHECK(mem(3).weights_gb > mem(0).weights_gb / 4);
  CHECK(mem(3).weights_gb < mem(0).weights_gb);
  for (int s = 1; s <= 3; ++s) CHECK(mem(s).total_gb < mem(s - 1).total_gb);
  CHECK(mem(3).activations_gb == doctest::Approx(mem(0).activations_gb));
  // Each GPU steps a quarter of the optimizer's state.
  CHECK(z[1].parallel->update_ms < 0.5 * z[0].parallel->update_ms);
  // Communication: DDP all-reduces once (the last microbatch), ZeRO-1 reduce-scatters once and
  // all-gathers the updated shards, ZeRO-2 reduce-scatters every microbatch, ZeRO-3 also
  // gathers the parameters for every microbatch's forward and backward.
  const ParallelReport &p0 = *z[0].parallel, &p1 = *z[1].parallel, &p2 = *z[2].parallel, &p3 = *z[3].parallel;
  CHECK(p0.dp_gather_ms == 0);
  CHECK(p1.dp_comm_ms - p1.dp_gather_ms == doctest::Approx(p0.dp_comm_ms / 2).epsilon(0.05));
  CHECK(p1.dp_gather_ms > 0);
  CHECK(p1.dp_exposed_ms >= p1.dp_gather_ms);  // the step's all-gather waits for the step
  CHECK(p2.dp_comm_ms - p2.dp_gather_ms == doctest::Approx(2 * (p1.dp_comm_ms - p1.dp_gather_ms)));
  CHECK(p3.dp_gather_ms > 3 * p1.dp_gather_ms);  // 2 microbatches x forward and backward
  CHECK(p3.dp_exposed_ms < p3.dp_comm_ms);       // prefetched under the compute
  for (const Report& r : z) CHECK(r.e2e_latency_ms == doctest::Approx(r.parallel->iteration_ms));
  // Megatron-LM's --overlap-param-gather: ZeRO-1's all-gather under the next forward, bucket
  // by bucket ahead of its readers: the same bytes, less of them exposed.
  Options o = test::roofline_options(8, 128, Mode::training, "dp=4,microbatches=2,zero=1,overlap_gather=1");
  o.optimizer = Optimizer::adam;
  const Report ov = analyze(m, gpu, o);
  REQUIRE(ov.parallel);
  CHECK(ov.parallel->config.overlap_gather);
  CHECK(ov.parallel->dp_gather_ms == doctest::Approx(p1.dp_gather_ms).epsilon(0.1));
  CHECK(ov.parallel->dp_exposed_ms < p1.dp_exposed_ms);
  CHECK(ov.parallel->iteration_ms < z[1].parallel->iteration_ms);
  for (const char* bad : {"dp=4,overlap_gather=1", "dp=4,zero=3,overlap_gather=1"})
    CHECK_THROWS_AS(parallel_micro_batch(parse_parallel(bad), Mode::training, 8), InputError);
  CHECK_THROWS_AS(parse_parallel("dp=4,zero=1,overlap_gather=2"), InputError);
}

TEST_CASE("parallel: a Llama's stages are balanced, cut where the residual stream alone crosses") {
  // Every layer reads the rotary tables and the causal mask, computed once from the positions:
  // each stage computes them itself, so they cross no cut, and the cuts fall on the block
  // boundaries through the layers (not all after the last layer's attention).
  const ModelConfig c = parse_hf_config(R"({"model_type": "llama", "hidden_size": 256, "intermediate_size": 688,
      "num_attention_heads": 8, "num_key_value_heads": 4, "num_hidden_layers": 8, "vocab_size": 1000,
      "max_position_embeddings": 2048, "hidden_act": "silu"})",
                                        "llama");
  const LoadedModel m = build_model(c);
  const Report r = analyze(m, GpuDatabase::builtin().resolve("h100"), test::roofline_options(8, 512, Mode::training, "pp=4,microbatches=4"));
  REQUIRE(r.parallel);
  const auto& st = r.parallel->stages;
  REQUIRE(st.size() == 4);
  double fastest = INFINITY, slowest = 0;
  for (const auto& s : st) {
    fastest = std::min(fastest, s.forward_ms + s.backward_ms);
    slowest = std::max(slowest, s.forward_ms + s.backward_ms);
  }
  CHECK(slowest < 1.35 * fastest);  // two layers a stage, the embedding and the head beside
  for (size_t s = 0; s + 1 < st.size(); ++s) CHECK(st[s].send_bytes == doctest::Approx(2.0 * 512 * 256 * 4));
}

TEST_CASE("parallel: activation checkpoints fall where the residual stream alone crosses") {
  const ModelConfig c = parse_hf_config(R"({"model_type": "llama", "hidden_size": 256, "intermediate_size": 688,
      "num_attention_heads": 8, "num_key_value_heads": 4, "num_hidden_layers": 8, "vocab_size": 1000,
      "max_position_embeddings": 2048, "hidden_act": "silu"})",
                                        "llama");
  const LoadedModel m = build_model(c);
  const Gpu gpu = GpuDatabase::builtin().resolve("h100");
  Options o = test::roofline_options(2, 512, Mode::training, "");
  o.recompute = Recompute::none;
  const Report plain = analyze(m, gpu, o);
  const Analysis a0 = prepare(m, o);
  o.recompute = Recompute::full;
  const Analysis a = prepare(m, o);
  const Report ckpt = analyze(m, gpu, o);
  REQUIRE(a.checkpoints);
  const CheckpointPlan& p = *a.checkpoints;
  std::string where;
  for (int c : p.positions) where += a.graph.nodes[static_cast<size_t>(c)].name + " ";
  CAPTURE(where);
  // Each pre-norm layer is checkpointed at its input and at the residual add between its
  // attention and its MLP: two segments a layer (the final norm's and the head's beside).
  std::set<std::string> at;
  for (int c : p.positions) at.insert(a.graph.nodes[static_cast<size_t>(c)].name);
  for (int l = 0; l < 8; ++l)
    for (const char* norm : {"input_layernorm", "post_attention_layernorm"})
      CHECK(at.count("model.layers." + std::to_string(l) + "." + norm + "/Pow"));
  CHECK(p.segments >= 2 * 8);
  CHECK(p.segments <= 2 * 8 + 4);
  for (int c : p.positions) CHECK(a.graph.nodes[static_cast<size_t>(c)].name.find("causal") == std::string::npos);
  const double residual = 2.0 * 512 * 256 * 4;
  for (const PathTensor& t : p.kept) CHECK(a.graph.find(t.name)->num_elements() * 4.0 == doctest::Approx(residual));
  // The segments' forward runs again: the backward pass gains about one forward of the layers.
  double recomputed = 0;
  for (const Kernel& k : a.kernels.kernels) recomputed += k.recomputed ? k.flops : 0;
  double forward = 0;
  for (const Kernel& k : a0.kernels.kernels) forward += k.phase == Phase::forward ? k.flops : 0;
  CHECK(recomputed > 0.5 * forward);
  CHECK(recomputed < forward);
  CHECK(ckpt.backward_ms > plain.backward_ms);
  CHECK(ckpt.forward_ms == doctest::Approx(plain.forward_ms));
  // The step keeps the checkpoints' tensors, what lies outside the segments (the embedding, the
  // head and the loss) and one segment's activations at a time.
  REQUIRE(plain.memory);
  REQUIRE(ckpt.memory);
  CHECK(ckpt.memory->recompute_segments == p.segments);
  CHECK(ckpt.memory->activations_gib < 0.5 * plain.memory->activations_gib);
  CHECK(ckpt.memory->activations_gib * (1024.0 * 1024 * 1024) > 16 * residual);
  CHECK(ckpt.memory->weights_gib == doctest::Approx(plain.memory->weights_gib));
  // The same plan on pipeline stages: each stage's share, one segment at a time.
  o.parallel = parse_parallel("pp=2,microbatches=1");
  const Report staged = analyze(m, gpu, o);
  REQUIRE(staged.parallel);
  const auto& st = staged.parallel->stages;
  // Each stage holds its checkpoints and one of its segments: together more than one GPU's
  // step (two segments at once), less than twice it.
  CHECK(st[0].activations_gb + st[1].activations_gb < 2 * ckpt.memory->activations_gib);
  CHECK(st[0].activations_gb + st[1].activations_gb > ckpt.memory->activations_gib);
  // Inference refuses it.
  o.parallel = ParallelConfig{};
  o.mode = Mode::inference;
  CHECK_THROWS_AS(prepare(m, o), InputError);
}

TEST_CASE("parallel: selective recomputation drops and recomputes the attention cores alone") {
  const ModelConfig c = parse_hf_config(R"({"model_type": "llama", "hidden_size": 256, "intermediate_size": 688,
      "num_attention_heads": 8, "num_key_value_heads": 4, "num_hidden_layers": 4, "vocab_size": 1000,
      "max_position_embeddings": 4096, "hidden_act": "silu"})",
                                        "llama");
  const LoadedModel m = build_model(c);
  Options o = test::roofline_options(1, 1024, Mode::training, "");
  o.dtype = DType::bf16;
  o.attention = Attention::unfused;  // Megatron-LM's core attention without FlashAttention
  const Analysis plain = prepare(m, o);
  o.recompute = Recompute::selective;
  const Analysis sel = prepare(m, o);
  REQUIRE(sel.checkpoints);
  CHECK(sel.checkpoints->segments == 4);  // one core a layer
  CHECK(sel.checkpoints->positions.empty());
  std::map<std::string, int> recomputed;
  for (const Kernel& k : sel.kernels.kernels)
    if (k.recomputed) ++recomputed[k.op];
  CHECK(recomputed["softmax"] == 4);
  CHECK(recomputed["bmm"] == 8);       // Q K^T and P V
  CHECK(recomputed.count("linear") == 0);  // the projections are not recomputed
  REQUIRE(plain.memory);
  REQUIRE(sel.memory);
  CHECK(sel.memory->recompute_attention);
  // The scores and probabilities of every layer but one are dropped: 4 layers x (scores, probs)
  // of 8 heads x 1024^2 in BF16 are most of this step's activations.
  CHECK(sel.memory->activations_gib < 0.6 * plain.memory->activations_gib);
  // FlashAttention keeps no scores: nothing to recompute.
  o.attention = Attention::fused;
  const Analysis flash = prepare(m, o);
  REQUIRE(flash.checkpoints);
  CHECK(flash.checkpoints->segments == 0);
  CHECK(std::none_of(flash.kernels.kernels.begin(), flash.kernels.kernels.end(), [](const Kernel& k) { return k.recomputed; }));
}

TEST_CASE("parallel: the stages keep the activations one GPU's training step keeps, split among them") {
  // The multi-GPU plan counts what the backward pass reads as the single-GPU footprint does
  // (PyTorch's derivative rules), each tensor on the stage of the node that keeps it.
  LoadedModel m = load_model(test::example_model());
  const Gpu gpu = GpuDatabase::builtin().resolve("a100-40gb");
  const Report one = analyze(m, gpu, test::roofline_options(4, 128, Mode::training, ""));
  REQUIRE(one.memory);
  const Report two = analyze(m, gpu, test::roofline_options(4, 128, Mode::training, "pp=2,microbatches=1"));
  REQUIRE(two.parallel);
  const auto& st = two.parallel->stages;
  CHECK(st[0].activations_gb + st[1].activations_gb == doctest::Approx(one.memory->activations_gib));
  CHECK(st[0].activations_gb > 0.3 * one.memory->activations_gib);
  CHECK(st[1].activations_gb > 0.3 * one.memory->activations_gib);
}

TEST_CASE("parallel: tensor-parallel inference reports one GPU's memory") {
  // GPT-2 small over 4 GPUs: every GEMM weight and the token table split (the learned
  // positions and the norms whole); the activations a head's or a column block's share.
  LoadedModel m = load_model(test::example_model());
  const Gpu gpu = GpuDatabase::builtin().resolve("a100-40gb");
  const Report one = analyze(m, gpu, test::roofline_options(8, 1024, Mode::inference, ""));
  const Report four = analyze(m, gpu, test::roofline_options(8, 1024, Mode::inference, "tp=4"));
  REQUIRE(one.memory);
  REQUIRE(four.memory);
  CHECK(one.memory->tp == 1);
  CHECK(four.memory->tp == 4);
  CHECK(four.memory->weights_gib < 0.3 * one.memory->weights_gib);
  CHECK(four.memory->weights_gib > 0.25 * one.memory->weights_gib);
  CHECK(four.memory->activations_gib < one.memory->activations_gib);
  CHECK(four.memory->activations_gib > 0.25 * one.memory->activations_gib);
  CHECK(memory_text(*four.memory).find("per GPU") != std::string::npos);
}

TEST_CASE("parallel: each axis crosses its own link: tensor parallel in a node, pipeline between nodes") {
  LoadedModel m = load_model(test::example_model());
  const Gpu h100 = GpuDatabase::builtin().resolve("h100");                         // NVLink domain of 8
  const Report r = analyze(m, h100, test::roofline_options(8, 128, Mode::training, "dp=2,tp=4,pp=2"));  // two nodes
  REQUIRE(r.parallel);
  CHECK(r.parallel->tp_link.kind == h100.nvlink);
  CHECK(r.parallel->dp_link.kind == h100.nvlink);  // tp x dp = 8 GPUs: one node
  CHECK(r.parallel->link.kind == "pcie");          // the stages' nodes
  const Report wide = analyze(m, h100, test::roofline_options(8, 128, Mode::training, "dp=4,tp=4"));
  REQUIRE(wide.parallel);
  CHECK(wide.parallel->tp_link.kind == h100.nvlink);
  CHECK(wide.parallel->dp_link.kind == "pcie");  // a data-parallel group spans 16 GPUs
}

TEST_CASE("parallel: memory beyond the GPU warns") {
  LoadedModel m = load_model(test::example_model());
  const Report r = analyze(m, GpuDatabase::builtin().resolve("l4"), test::roofline_options(256, 1024, Mode::training, "dp=2"));
  REQUIRE(r.parallel);
  CHECK(r.parallel->peak_memory_gb > 24);
  bool warned = false;
  for (const auto& w : r.warnings) warned = warned || w.find("GiB per GPU") != std::string::npos;
  CHECK(warned);
}

TEST_CASE("parallel: a mixture of experts splits its experts and all-reduces once, routers and normalised bottlenecks stay whole") {
  // DeepSeek-V3's structure, small (multi-head latent attention, a dense first layer, routed
  // experts and a shared one) and Mixtral's (a router straight into the experts).
  const ModelConfig ds = parse_hf_config(R"({"model_type": "deepseek_v3", "hidden_size": 256, "intermediate_size": 512,
      "num_attention_heads": 8, "num_hidden_layers": 2, "vocab_size": 1000, "q_lora_rank": 64, "kv_lora_rank": 32,
      "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 8, "num_experts_per_tok": 2,
      "moe_intermediate_size": 64, "n_shared_experts": 1, "first_k_dense_replace": 1, "hidden_act": "silu"})",
                                         "ds");
  const LoadedModel m = build_model(ds);
  const Graph& g = m.model.graph;
  const auto roles = tensor_parallel_roles(g, 4);
  std::map<std::string, TpRole> by_name;
  for (size_t i = 0; i < g.nodes.size(); ++i) by_name[g.nodes[i].name] = roles[i];
  const std::string a = "model.layers.1.self_attn", e = "model.layers.1.block_sparse_moe";
  CHECK(by_name.at(a + ".q_a_proj/MatMul") == TpRole::replicated);
  CHECK(by_name.at(a + ".kv_a_proj_with_mqa/MatMul") == TpRole::replicated);
  CHECK(by_name.at(a + ".q_b_proj/MatMul") == TpRole::column);
  CHECK(by_name.at(a + ".kv_b_proj/MatMul") == TpRole::column);
  CHECK(by_name.at(a + ".o_proj/MatMul") == TpRole::row);
  CHECK(by_name.at(e + ".gate/MatMul") == TpRole::replicated);
  CHECK(by_name.at(e + "/MoE") == TpRole::row);
  // Prefill at tp=4: the experts' GEMMs carry a quarter of the work; all-reduces after the
  // attention and the MLP of each layer (the experts' output and the shared expert's summed
  // first, one all-reduce for both).
  Options o;
  o.dims.batch = 1;
  o.dims.seq = 64;
  o.dtype = DType::bf16;
  o.parallel = parse_parallel("tp=4");
  const Analysis four = prepare(m, o);
  o.parallel = parse_parallel("tp=1");
  const Analysis one = prepare(m, o);
  auto expert_flops = [](const Analysis& x) {
    double f = 0;
    for (const auto& k : x.kernels.kernels)
      if (k.cls == KernelClass::gemm && k.op == "bmm" && k.note.find("experts reached") != std::string::npos) f += k.flops;
    return f;
  };
  CHECK(expert_flops(four) == doctest::Approx(expert_flops(one) / 4).epsilon(0.02));
  // Each expert split along its intermediate dim (64 / 4): fc1 and fc3 by output columns, fc2
  // by its reduction.
  for (const auto& k : four.kernels.kernels) {
    if (k.expert_part == Kernel::ExpertPart::up) CHECK((k.gemm.n == 16 && k.gemm.k == 256));
    if (k.expert_part == Kernel::ExpertPart::down) CHECK((k.gemm.k == 16 && k.gemm.n == 256));
  }
  int ar = 0;
  for (const auto& k : four.kernels.kernels) ar += k.cls == KernelClass::collective;
  CHECK(ar == 2 + 2 + 1);  // dense layer, MoE layer, the vocabulary-parallel embedding

  // Experts over the 4 GPUs (ep=4): whole experts (intermediate 64), 2 of 8 per GPU, the
  // busiest GPU's tokens; the same all-reduces. A decode step reads, on the busiest GPU, at
  // least the weights a tensor-parallel GPU reads; a long prompt balances the GPUs.
  auto expert_bytes = [](const Analysis& x) {
    double b = 0;
    for (const auto& k : x.kernels.kernels)
      if (k.cls == KernelClass::gemm && k.expert_part != Kernel::ExpertPart::none) b += k.bytes;
    return b;
  };
  o.parallel = parse_parallel("tp=4,ep=4");
  const Analysis ep = prepare(m, o);
  for (const auto& k : ep.kernels.kernels) {
    if (k.expert_part == Kernel::ExpertPart::up) CHECK((k.gemm.n == 64 && k.gemm.k == 256 && k.gemm.batch <= 2));
    if (k.expert_part == Kernel::ExpertPart::down) CHECK((k.gemm.k == 64 && k.gemm.n == 256 && k.gemm.batch <= 2));
    if (k.expert_part != Kernel::ExpertPart::none) CHECK(k.note.find("busiest of 4 GPUs") != std::string::npos);
  }
  int ep_ar = 0;
  for (const auto& k : ep.kernels.kernels) ep_ar += k.cls == KernelClass::collective;
  CHECK(ep_ar == ar);
  CHECK(expert_flops(ep) == 0);  // the notes say where the experts run, not "experts reached"
  o.dims.seq = 1;
  o.parallel = parse_parallel("tp=4");
  const double tp_step = expert_bytes(prepare(m, o));
  o.parallel = parse_parallel("tp=4,ep=4");
  CHECK(expert_bytes(prepare(m, o)) >= tp_step);
  o.parallel = parse_parallel("tp=4,ep=2");  // 4 experts per pair of GPUs, each split in two
  for (const auto& k : prepare(m, o).kernels.kernels)
    if (k.expert_part == Kernel::ExpertPart::up) CHECK((k.gemm.n == 32 && k.gemm.batch <= 4));
}

TEST_CASE("parallel: weights held in Constant nodes take Megatron roles and stage placement as initializers do") {
  // An embedding and an MLP, its weights initializers or Constant nodes' values (Paddle2ONNX,
  // some tf2onnx graphs): the same roles, the same per-GPU kernels, the same parameters.
  auto build = [](bool constant_nodes) {
    test::IrGraph b;
    b.input("ids", {64}, DType::i64);
    for (const auto& [name, dims] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
             {"table", {1000, 256}}, {"w1", {256, 1024}}, {"w2", {1024, 256}}}) {
      if (constant_nodes) b.node("Constant", {}, {b.t(name, dims)});
      else b.w(name, dims);
    }
    b.node("Gather", {"table", "ids"}, {b.t("x", {64, 256})});
    b.node("MatMul", {"x", "w1"}, {b.t("h", {64, 1024})});
    b.node("Relu", {"h"}, {b.t("r", {64, 1024})});
    b.node("MatMul", {"r", "w2"}, {b.t("y", {64, 256})});
    b.output("y");
    return b;
  };
  const test::IrGraph init = build(false), cons = build(true);
  const auto roles = [](const Graph& g) {
    std::vector<TpRole> r;
    const auto all = tensor_parallel_roles(g, 2);
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (g.nodes[i].op_type != "Constant") r.push_back(all[i]);
    return r;
  };
  CHECK(roles(init.g) == std::vector<TpRole>{TpRole::replicated, TpRole::column, TpRole::sharded, TpRole::row});
  CHECK(roles(cons.g) == roles(init.g));
  CHECK(tensor_parallel_split_weights(cons.g, tensor_parallel_roles(cons.g, 2)) == std::set<std::string>{"w1", "w2"});
  const KernelList p = shard_tensor_parallel(init.g, test::lower_with(init.g, Fusion::eager, Mode::training), 2);
  const KernelList q = shard_tensor_parallel(cons.g, test::lower_with(cons.g, Fusion::eager, Mode::training), 2);
  std::string pk, qk;
  for (const auto& k : p.kernels) pk += k.op + "/" + std::to_string(static_cast<int>(k.phase)) + " ";
  for (const auto& k : q.kernels) qk += k.op + "/" + std::to_string(static_cast<int>(k.phase)) + " ";
  CAPTURE(pk);
  CAPTURE(qk);
  REQUIRE(p.kernels.size() == q.kernels.size());
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    CAPTURE(i);
    CHECK(p.kernels[i].phase == q.kernels[i].phase);
    CHECK(p.kernels[i].flops == q.kernels[i].flops);
    CHECK(p.kernels[i].weight == q.kernels[i].weight);
  }
  // The table is a parameter too: three update kernels either way.
  CHECK(test::of_phase(q, Phase::update).size() == 3);
  // The data path starts at the table either way: the same activations cross each position.
  const auto crossing = [](const Graph& g) {
    double bytes = 0;
    for (const PathTensor& t : data_path_tensors(g, DType::undefined)) bytes += t.bytes;
    return bytes;
  };
  CHECK(crossing(cons.g) > 0);
  CHECK(crossing(cons.g) == doctest::Approx(crossing(init.g)));
}

TEST_CASE("parallel: sequence parallelism splits the replicated data path over the tp GPUs, the collectives unchanged") {
  LoadedModel m = load_model(test::example_model());
  const Gpu gpu = GpuDatabase::builtin().resolve("a100-40gb");
  Options o = test::roofline_options(4, 128, Mode::training, "tp=4");
  const Analysis plain = prepare(m, o);
  const Report r0 = analyze(m, gpu, o);
  o.parallel = parse_parallel("tp=4,sp=1");
  CHECK(o.parallel.sequence_parallel);
  const Analysis sp = prepare(m, o);
  const Report r1 = analyze(m, gpu, o);
  REQUIRE(plain.kernels.kernels.size() == sp.kernels.kernels.size());
  int norms = 0;
  double coll0 = 0, coll1 = 0, gemm0 = 0, gemm1 = 0;
  for (size_t i = 0; i < plain.kernels.kernels.size(); ++i) {
    const Kernel& a = plain.kernels.kernels[i];
    const Kernel& b = sp.kernels.kernels[i];
    if (a.cls == KernelClass::layernorm && a.phase == Phase::forward) {
      ++norms;
      CHECK(b.rows * 4 == a.rows);  // a quarter of the tokens each
      CHECK(b.cols == a.cols);
    }
    if (a.cls == KernelClass::collective) coll0 += a.bytes, coll1 += b.bytes;
    if (a.cls == KernelClass::gemm) gemm0 += a.flops, gemm1 += b.flops;
  }
  CHECK(norms == 2 * 12 + 1);
  CHECK(coll1 == doctest::Approx(coll0));   // each all-reduce a reduce-scatter and an all-gather
  CHECK(gemm1 == doctest::Approx(gemm0));   // the tensor-parallel GEMMs as they were
  REQUIRE(r0.parallel);
  REQUIRE(r1.parallel);
  CHECK(r1.parallel->stages[0].activations_gb < 0.8 * r0.parallel->stages[0].activations_gb);
  CHECK(r1.parallel->iteration_ms < r0.parallel->iteration_ms);
  CHECK(r1.parallel->config.sequence_parallel);
}

TEST_CASE("parallel: an If's branch takes Megatron roles as a graph of its own, Loop bodies run whole") {
  // An MLP (column- then row-parallel, one all-reduce) inside the branch a known condition
  // takes, its weights in the outer graph (optimum's merged decoders), shards as the same MLP
  // outside an If; inside a Loop body it runs whole on every GPU, with a warning.
  auto mlp = [](test::IrGraph& b, const std::string& x) {
    b.node("MatMul", {x, "w1"}, {b.t("h", {64, 1024})});
    b.node("Relu", {"h"}, {b.t("r", {64, 1024})});
    b.node("MatMul", {"r", "w2"}, {b.t("y", {64, 256})});
  };
  test::IrGraph plain;
  plain.input("x", {64, 256});
  plain.w("w1", {256, 1024});
  plain.w("w2", {1024, 256});
  mlp(plain, "x");
  auto branch = std::make_shared<Graph>();
  {
    test::IrGraph bb;
    mlp(bb, "x");
    *branch = bb.g;
  }
  test::IrGraph outer;
  outer.input("x", {64, 256});
  outer.w("w1", {256, 1024});
  outer.w("w2", {1024, 256});
  outer.ints("cond", {1});
  Node& iff = outer.node("If", {"cond"}, {outer.t("out", {64, 256})});
  Attribute a;
  a.kind = Attribute::Kind::g;
  a.graphs = {branch};
  iff.attributes["then_branch"] = a;
  iff.attributes["else_branch"] = a;
  const KernelList p = shard_tensor_parallel(plain.g, test::lower_with(plain.g, Fusion::eager), 2);
  const KernelList q = shard_tensor_parallel(outer.g, test::lower_with(outer.g, Fusion::eager), 2);
  REQUIRE(p.kernels.size() == q.kernels.size());
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    CAPTURE(i);
    CHECK(p.kernels[i].cls == q.kernels[i].cls);
    CHECK(p.kernels[i].flops == q.kernels[i].flops);
    CHECK(p.kernels[i].bytes == q.kernels[i].bytes);
  }
  CHECK(std::count_if(q.kernels.begin(), q.kernels.end(), [](const Kernel& k) { return k.cls == KernelClass::collective; }) == 1);
  CHECK(q.warnings.empty());
  // The same MLP as a Loop body: whole on every GPU, counted in a warning.
  test::IrGraph looped;
  looped.input("x", {64, 256});
  looped.w("w1", {256, 1024});
  looped.w("w2", {1024, 256});
  Node& loop = looped.node("Loop", {looped.ints("trips", {2}), looped.t("c", {}, DType::boolean), "x"}, {looped.t("out", {64, 256})});
  Attribute body;
  body.kind = Attribute::Kind::g;
  body.graphs = {branch};
  loop.attributes["body"] = body;
  const KernelList whole = shard_tensor_parallel(looped.g, test::lower_with(looped.g, Fusion::eager), 2);
  CHECK(std::none_of(whole.kernels.begin(), whole.kernels.end(), [](const Kernel& k) { return k.cls == KernelClass::collective; }));
  REQUIRE(whole.warnings.size() == 1);
  CHECK(whole.warnings[0].find("run whole on every GPU") != std::string::npos);
}

TEST_CASE("parallel: context parallelism runs 1/cp of the tokens, every key in the attention, its ring beside it") {
  LoadedModel m = load_model(test::example_model());
  const Gpu gpu = GpuDatabase::builtin().resolve("h100");
  Options o = test::roofline_options(4, 128, Mode::training, "dp=1");
  o.dtype = DType::bf16;
  o.attention = Attention::fused;
  const Analysis plain = prepare(m, o);
  const Report r0 = analyze(m, gpu, o);
  o.parallel = parse_parallel("cp=4");
  CHECK(o.parallel.cp == 4);
  CHECK(o.parallel.gpus() == 4);
  const Analysis cp = prepare(m, o);
  const Report r1 = analyze(m, gpu, o);
  std::vector<Kernel> split, rings;
  for (const Kernel& k : cp.kernels.kernels) (k.op == "cp_ring" ? rings : split).push_back(k);
  REQUIRE(split.size() == plain.kernels.kernels.size());
  int linears = 0, flash = 0;
  for (size_t i = 0; i < split.size(); ++i) {
    const Kernel& a = plain.kernels.kernels[i];
    const Kernel& b = split[i];
    if (a.op == "linear" && a.phase == Phase::forward) {
      ++linears;
      CHECK(b.gemm.m * 4 == a.gemm.m);  // a quarter of the tokens
      CHECK(b.flops == doctest::Approx(a.flops / 4));
    }
    if (a.op == "flash_attention" || a.op == "flash_attention_bwd") {
      ++flash;
      // The local queries against every key: a quarter of the products, the K/V read whole.
      const double kv = double(a.operand_elems[1]) * 2 * (a.op == "flash_attention_bwd" ? 2 : 1);
      CHECK(b.flops == doctest::Approx(a.flops / 4));
      CHECK(b.bytes == doctest::Approx(kv + (a.bytes - kv) / 4));
    }
    if (a.phase == Phase::update) CHECK(b.bytes == a.bytes);
  }
  CHECK(linears > 0);
  CHECK(flash == 2 * 12);
  // A ring after each: three steps of a quarter of the K/V (and their gradients backward).
  REQUIRE(rings.size() == 2 * 12);
  for (const Kernel& r : rings) {
    CHECK(r.cls == KernelClass::collective);
    const double kv = 2.0 * 4 * 12 * 128 * 64 * 2 * (r.phase == Phase::backward ? 2 : 1);  // K and V, bf16
    CHECK(r.bytes == doctest::Approx(3 * kv / 4));
  }
  REQUIRE(r0.parallel);
  REQUIRE(r1.parallel);
  CHECK(r1.parallel->stages[0].activations_gb == doctest::Approx(r0.parallel->stages[0].activations_gb / 4).epsilon(0.01));
  CHECK(r1.parallel->cp_comm_ms > 0);
  CHECK(r1.parallel->cp_exposed_ms <= r1.parallel->cp_comm_ms);
  CHECK(r1.parallel->dp_comm_ms > 0);  // the gradients reduced over the 4 GPUs of the context group
  CHECK(r0.parallel->dp_comm_ms == 0);
  // The kernels a quarter as long. At 512 tokens the rings' step latencies outweigh the
  // attention blocks they hide behind, and the gradients' all-reduce the step.
  CHECK(r1.parallel->compute_ms - r1.parallel->cp_exposed_ms < 0.5 * r0.parallel->compute_ms);
  CHECK(r1.parallel->cp_exposed_ms > 0);
  // Ring attention needs FlashAttention: automatic attention at 16 bits is SDPA's; unfused
  // attention, or FP32 attention however asked, has no ring to pass. Inference takes no cp.
  o.attention = Attention::automatic;
  CHECK(prepare(m, o).kernels.kernels.size() == cp.kernels.kernels.size());
  o.attention = Attention::unfused;
  CHECK_THROWS_AS(prepare(m, o), InputError);
  o.attention = Attention::fused;
  o.dtype = DType::f32;
  CHECK_THROWS_AS(prepare(m, o), InputError);
  CHECK_THROWS_AS(check_inference_parallel(parse_parallel("cp=2")), InputError);
}

TEST_CASE("parallel: a context-parallel ring shows only what its steps take beyond the attention's blocks") {
  Link l;
  l.kind = "test";
  l.spec_gbps = 125;  // 100 GB/s at 0.8
  l.step_latency_us = 5;
  // Three steps of 1 GB: 10.005 ms each, against 2 ms of attention a step: 3 x 8.005 exposed.
  CHECK(cp_ring_exposed_ms(3e9, 8, 4, l) == doctest::Approx(3 * (10.005 - 2)));
  CHECK(cp_ring_exposed_ms(3e9, 80, 4, l) == 0);  // 20 ms a step hides the transfer
  CHECK(cp_ring_exposed_ms(3e9, 8, 1, l) == 0);
  CHECK(cp_ring_exposed_ms(0, 8, 4, l) == 0);
}

TEST_CASE("parallel: expert parallelism in training runs a GPU's experts on the group's tokens, all-to-alls around them") {
  // Mixtral's structure, small: 8 experts, top-2, two layers.
  ModelConfig c = read_hf_config(test::source_dir() + "/tests/data/mixtral_8x7b.json");
  c.layers = 2;
  c.hidden = 256;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.ffn = 512;
  c.vocab = 1000;
  REQUIRE(c.experts == 8);
  REQUIRE(c.experts_per_token == 2);
  const LoadedModel m = build_model(c);
  const Gpu gpu = GpuDatabase::builtin().resolve("h100");
  Options o = test::roofline_options(8, 128, Mode::training, "dp=4");
  o.dtype = DType::bf16;
  const Analysis plain = prepare(m, o);
  const Report r0 = analyze(m, gpu, o);
  o.parallel = parse_parallel("dp=4,ep=4");
  const Analysis ep = prepare(m, o);
  const Report r1 = analyze(m, gpu, o);
  std::vector<Kernel> a2a, rest;
  for (const Kernel& k : ep.kernels.kernels) (k.op == "ep_alltoall" ? a2a : rest).push_back(k);
  REQUIRE(rest.size() == plain.kernels.kernels.size());
  // Two a layer in each pass: dispatch and combine; each GPU's 2 tokens x top-2 x 256 wide rows
  // x 128 positions, 3/4 of them sent.
  REQUIRE(a2a.size() == 2 * 2 * 2);
  for (const Kernel& k : a2a) CHECK(k.bytes == doctest::Approx(2.0 * 128 * 2 * 256 * 2 * 3 / 4));
  double expert_flops0 = 0, expert_flops1 = 0, update0 = 0, update1 = 0;
  for (size_t i = 0; i < rest.size(); ++i) {
    const Kernel& a = plain.kernels.kernels[i];
    const Kernel& b = rest[i];
    if (a.expert_part != Kernel::ExpertPart::none && a.cls == KernelClass::gemm) {
      expert_flops0 += a.flops, expert_flops1 += b.flops;
      CHECK(b.gemm.batch <= 2);  // 8 / 4 experts a GPU
    }
    if (a.phase == Phase::update) update0 += a.bytes, update1 += b.bytes;
  }
  // The same routed work a GPU (the group's tokens over a quarter of the experts), more on
  // the busiest; the experts' updates on a quarter.
  CHECK(expert_flops1 >= expert_flops0);
  CHECK(expert_flops1 < 1.5 * expert_flops0);
  CHECK(update1 < update0);
  REQUIRE(r0.parallel);
  REQUIRE(r1.parallel);
  CHECK(r1.parallel->ep_comm_ms > 0);
  CHECK(r0.parallel->ep_comm_ms == 0);
  CHECK(r1.parallel->stages[0].weights_gb < 0.6 * r0.parallel->stages[0].weights_gb);
  // dp = ep: each expert on one GPU, its gradients reduced nowhere.
  CHECK(r1.parallel->dp_comm_ms < r0.parallel->dp_comm_ms);
  // ZeRO already gives each GPU 1/dp of every update, experts included (E/ep experts over the
  // dp/ep GPUs that hold them): the same updates with and without ep.
  const auto update_bytes = [&](const std::string& spec) {
    Options z = o;
    z.parallel = parse_parallel(spec);
    double bytes = 0;
    for (const Kernel& k : prepare(m, z).kernels.kernels)
      if (k.phase == Phase::update) bytes += k.bytes;
    return bytes;
  };
  CHECK(update_bytes("dp=4,ep=4,zero=1") == doctest::Approx(update_bytes("dp=4,zero=1")));
  // Under context parallelism a GPU routes its share of the sequence: half the all-to-all.
  Options cp = o;
  cp.parallel = parse_parallel("dp=4,ep=4,cp=2");
  cp.attention = Attention::fused;
  double a2a_cp = 0;
  for (const Kernel& k : prepare(m, cp).kernels.kernels)
    if (k.op == "ep_alltoall") a2a_cp += k.bytes;
  double a2a_all = 0;
  for (const Kernel& k : a2a) a2a_all += k.bytes;
  CHECK(a2a_cp == doctest::Approx(a2a_all / 2));
}

TEST_CASE("parallel: Ulysses context parallelism runs 1/cp of the heads on every token, an all-to-all either side") {
  LoadedModel m = load_model(test::example_model());
  const Gpu gpu = GpuDatabase::builtin().resolve("h100");
  Options o = test::roofline_options(4, 128, Mode::training, "dp=1");
  o.dtype = DType::bf16;
  const Analysis plain = prepare(m, o);
  o.parallel = parse_parallel("cp=4,cp_comm=a2a");
  CHECK(o.parallel.cp_comm == CpComm::a2a);
  const Analysis a2a = prepare(m, o);
  std::vector<Kernel> split, exchanges;
  for (const Kernel& k : a2a.kernels.kernels) (k.op == "cp_alltoall" ? exchanges : split).push_back(k);
  CHECK(std::none_of(a2a.kernels.kernels.begin(), a2a.kernels.kernels.end(), [](const Kernel& k) { return k.op == "cp_ring"; }));
  REQUIRE(split.size() == plain.kernels.kernels.size());
  double q = 0, kv = 0;
  int flash = 0;
  for (size_t i = 0; i < split.size(); ++i) {
    const Kernel& a = plain.kernels.kernels[i];
    const Kernel& b = split[i];
    if (!is_flash_gemm(a)) continue;
    ++flash;
    // Every query of a quarter of the heads: a quarter of everything, K/V included.
    CHECK(b.flops == doctest::Approx(a.flops / 4));
    CHECK(b.bytes == doctest::Approx(a.bytes / 4));
    CHECK(b.gemm.m == a.gemm.m);
    CHECK(b.gemm.batch * 4 == a.gemm.batch);
    q = double(a.operand_elems[0]);
    kv = double(a.operand_elems[1]);
  }
  CHECK(flash == 2 * 12);
  // Two a layer forward (Q, K, V in; the output back) and two backward (the output's gradient
  // in; the gradients of Q, K and V back): each GPU sends 3/4 of its quarter of the tokens'.
  REQUIRE(exchanges.size() == 4 * 12);
  double sent = 0;
  for (const Kernel& e : exchanges) {
    CHECK(e.cls == KernelClass::collective);
    sent += e.bytes;
  }
  CHECK(sent == doctest::Approx(12 * 2 * (q + kv + q) / 4 * 3 / 4 * 2));  // bf16
  const Report r = analyze(m, gpu, o);
  REQUIRE(r.parallel);
  CHECK(r.parallel->cp_comm_ms > 0);
  CHECK(r.parallel->cp_exposed_ms == doctest::Approx(r.parallel->cp_comm_ms));  // on the critical path
  CHECK_THROWS_AS(parse_parallel("cp=2,cp_comm=mesh"), InputError);
  o.parallel = parse_parallel("dp=2,cp_comm=a2a");
  CHECK_THROWS_AS(prepare(m, o), InputError);  // no context-parallel group to exchange over
  // Whole heads over the group: cp divides a GPU's query heads and its KV heads (8 and 2 here;
  // under tp=2, 4 and 1). The ring takes any.
  const LoadedModel llama = build_model(parse_hf_config(R"({"model_type": "llama", "hidden_size": 256,
      "intermediate_size": 512, "num_attention_heads": 8, "num_key_value_heads": 2, "num_hidden_layers": 2,
      "vocab_size": 1000, "hidden_act": "silu"})", "llama"));
  Options lo = test::roofline_options(2, 128, Mode::training, "cp=2,cp_comm=a2a");
  lo.dtype = DType::bf16;
  const Analysis two = prepare(llama, lo);
  for (const Kernel& k : two.kernels.kernels)
    if (is_flash_gemm(k)) CHECK((k.heads == 8 && k.kv_heads == 2));
  for (const char* spec : {"cp=4,cp_comm=a2a", "tp=2,cp=2,cp_comm=a2a"}) {
    lo.parallel = parse_parallel(spec);
    CHECK_THROWS_AS(prepare(llama, lo), InputError);
  }
  lo.parallel = parse_parallel("tp=2,cp=2");
  const Analysis ring = prepare(llama, lo);
  for (const Kernel& k : ring.kernels.kernels)
    if (is_flash_gemm(k)) CHECK((k.heads == 4 && k.kv_heads == 1));
}
