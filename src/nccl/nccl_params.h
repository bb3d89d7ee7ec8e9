// The tunables of ncclSignAllReduce, declared once (docs/PARAMETERS.md).
// Every rank of a communicator must see the same values: they shape the
// messages that ranks match with one another.
#pragma once

#include <cstdint>

#include "algo/cost_model.h"

namespace signlion {
namespace nccl {

// Payload bytes per chunk of a transfer (SIGNLION_NCCL_CHUNK_BYTES, default
// 4 MiB), within [64 B, 1 GiB]; a WARN names the variable when clamped.
int64_t chunkBytes();

// Elements per segment (SIGNLION_NCCL_SEGMENT, default 64M, rounded down to
// a multiple of 64, at least 64): a longer message runs as several whole
// all-reduces, so the scratch stays bounded whatever the count.
uint64_t segmentElements();

// The cost model of NCCL links (SIGNLION_NCCL_COST_*): NVLink-class
// bandwidth, a few microseconds per grouped step, GPU kernels.
algo::CostParams costParams();

// The cost model of a communicator grouped into nodes (node_groups.h: several
// nodes, one with several ranks): costParams()'s links become the intra-node
// class (NVLink), and a node's network link, shared by its ranks, is the
// inter-node class: SIGNLION_NCCL_COST_NET_ALPHA_NS (default 10000) and
// SIGNLION_NCCL_COST_NET_BETA_MBPS (default 25000: one 200 Gb/s NIC a node).
algo::CostParams nodeCostParams();

}  // namespace nccl
}  // namespace signlion
