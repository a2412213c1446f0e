"""An optimum-style merged decoder for the tests (decoder_model_merged.onnx): one graph whose
If on the boolean input `use_cache_branch` runs either the decoder step with its KV cache
(past_key_values.N.key/value) or the forward pass without one, both reading the same weights,
which the merge holds once in the outer graph. Built from the two graphs `neusight-onnx export`
writes for one config (the forward pass, and with --kv-cache the step); weights stay stubs."""
import onnx
from onnx import helper as h, TensorProto as T


def _branch(model, prefix, outer, shared, name):
    """The model's graph as an If branch: its tensors renamed under `prefix` except the outer
    graph's inputs and the shared weights; its own small constants stay inside it."""
    g = model.graph
    keep = set(outer) | set(shared)
    ren = lambda t: t if (not t or t in keep) else prefix + t
    nodes = []
    for n in g.node:
        m = onnx.NodeProto()
        m.CopyFrom(n)
        m.name = prefix + n.name
        m.input[:] = [ren(t) for t in n.input]
        m.output[:] = [ren(t) for t in n.output]
        nodes.append(m)
    inits = []
    for t in g.initializer:
        if t.name in shared:
            continue
        c = onnx.TensorProto()
        c.CopyFrom(t)
        c.name = prefix + t.name
        inits.append(c)
    logits = [o for o in g.output if o.name == "logits"][0]
    out = onnx.ValueInfoProto()
    out.CopyFrom(logits)
    out.name = prefix + "branch_logits"
    nodes.append(h.make_node("Identity", [ren("logits")], [out.name], name=prefix + "logits_out"))
    return h.make_graph(nodes, name, [], [out], inits)


def build(forward_path, step_path, path):
    """Writes the merged decoder of the exported forward pass and step to `path`."""
    fwd = onnx.load(forward_path, load_external_data=False)
    step = onnx.load(step_path, load_external_data=False)
    # The weights (external-data stubs) the two graphs share by name and shape.
    def weights(m):
        return {t.name: (t.data_type, tuple(t.dims)) for t in m.graph.initializer
                if t.data_location == onnx.TensorProto.EXTERNAL}
    wf, ws = weights(fwd), weights(step)
    shared = {n for n in wf if ws.get(n) == wf[n]}
    outer = [i.name for i in step.graph.input]
    then_g = _branch(step, "with_past/", outer, shared, "with_past")
    else_g = _branch(fwd, "no_past/", outer, shared, "no_past")
    inputs = list(step.graph.input) + [h.make_tensor_value_info("use_cache_branch", T.BOOL, [1])]
    logits = [o for o in step.graph.output if o.name == "logits"][0]
    node = h.make_node("If", ["use_cache_branch"], ["logits"], name="optimum::if", then_branch=then_g, else_branch=else_g)
    inits = [t for t in step.graph.initializer if t.name in shared]
    graph = h.make_graph([node], "merged_decoder", inputs, [logits], inits)
    model = h.make_model(graph, opset_imports=list(step.opset_import))
    model.ir_version = step.ir_version
    onnx.save(model, path)
