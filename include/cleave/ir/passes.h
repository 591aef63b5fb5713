// Graph passes: verification and simplification (NOTE [Graph IR]). Each pass rewrites the graph
// in place and keeps it in topological order.
#pragma once

#include <string>

#include "cleave/ir/graph.h"

namespace cleave::ir {

// Checks that every input of every node refers to an existing output of an earlier node
// (a later node means a cycle), that each op's recorded output dtypes and shapes are what its
// infer gives for its inputs (and that infer accepts them), that parameters and constants match
// their bound tensors, and that the graph's inputs and outputs exist. Throws Error naming the
// node ("%12 (MatMul 'fc1.matmul')") on the first problem. With Bindings::kDeferred a bound
// tensor's shape may differ from its node's: a compiled parallel step holds the whole parameter
// until it is loaded and sliced (NOTE [Sharded parameters] in
// cleave/runtime/sharded_parameters.h); the executor verifies the bindings then.
enum class Bindings { kChecked, kDeferred };
void verify(const Graph& graph, Bindings bindings = Bindings::kChecked);

// Removes ops (and constants) that neither reach a graph output nor feed a side-effecting op.
// Returns the number of nodes removed.
int dead_code_elimination(Graph& graph);

// Merges ops with the same primitive, attributes and inputs (never random or side-effecting ops,
// and never across a side effect, which may have changed what the inputs hold). Returns the
// number of ops merged away.
int common_subexpression_elimination(Graph& graph);

// Runs ops whose inputs are all literal constants at compile time and replaces them by their
// result (random and side-effecting ops excluded). Returns the number of ops folded.
int constant_folding(Graph& graph);

// Puts the nodes in the order `order` (order[k] is the old index of new node k; a permutation of
// every node) and renumbers every reference, the graph's inputs and outputs. Throws Error, and
// leaves the graph unchanged, when `order` is not a permutation or puts a node before one of its
// inputs.
void reorder_nodes(Graph& graph, const std::vector<int>& order);

// Per node, the node whose storage its output shares: its own index, or for a view
// (OpDef::output_is_view, like Reshape) the root of its input 0. Two values with different roots
// never share storage within a run (the memory plan gives live buffers different bytes).
std::vector<int> storage_roots(const Graph& graph);

// "%12" for an op's single output, "%12[1]" for output 1, "%para3_fc1.weight" for a parameter:
// how dumps and errors name a value.
std::string value_name(const Graph& graph, ValueRef v);
// "%12 (MatMul 'fc1.matmul')": how errors name a node.
std::string node_label(const Graph& graph, int node);

}  // namespace cleave::ir
