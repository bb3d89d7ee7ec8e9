// The rate of the network link between a host communicator's nodes, learned
// at ncclSignCommInitRank so that no user has to state it: the cost model's
// beta, the host executor's chunk and the socket transport's data streams
// follow it (docs/PARAMETERS.md, "Host communicator").
//
// How: a short probe when the communicator is made, not the first calls'
// transfers. A call's choices (algorithm, chunks) are fixed before it moves
// a byte and every rank must make the same ones, so a rate learned from
// calls would switch schedules mid-job at a point all ranks must agree on,
// and the first calls would run on a guess (the guess that opened four
// streams into 100 Mbit/s queues). The probe runs between the first ranks of
// the nodes, in a ring (each sends to the next node and receives from the
// previous one, all links at once, as a collective's steps load them), in
// rounds of 1, 4, then 16 MiB per link (messages of 128 KiB to 1 MiB, on the
// socket transport's data streams), until every receiver's round lasted
// 20 ms or the largest is done: about 0.1 s at 100 Mbit/s, 50 ms at
// 1 Gbit/s, 20 ms at 10 Gbit/s; the first round bounds it on a slow link
// (0.8 s at 10 Mbit/s). The rate of a round is that of its second half at the
// receiver: the first half passes a token bucket's burst (tc tbf: 2 ms of
// the rate, 64 KiB at least) and TCP's slow start. Every rank then takes the
// same value from one table gathered through the bootstrap: the slowest node's, as a
// collective's steps wait for their slowest link. Nothing is kept between
// communicators, so a job on a changed link learns the new rate.
#pragma once

#include <cstdint>
#include <string>

#include "algo/topology.h"
#include "host/bootstrap.h"
#include "host/net.h"

namespace signlion {
namespace host {

// The line rate a measured goodput stands for, Mbit/s: TCP over Ethernet
// carries about 95 % of the line's bits, and one stream a little less on a
// fast link (8.9 Gbit/s over a 10 Gbit/s veth), less still on a busy host
// (87 Mbit/s through a 100 Mbit/s tbf star), so a measurement within
// [0.7, 1.1] of a standard rate (10, 100 Mbit/s, 1, 2.5, 5, 10, 25, 40, 50,
// 100, 200, 400 Gbit/s) is that rate: the settings then match those a user
// who knows the link would set. Other measurements stand as they are
// (rounded; at least 1).
int64_t nominalLinkMbits(double measuredMbits);
// Whether mbits is one of those standard rates.
bool isStandardLineRate(int64_t mbits);
// Whether a communicator's rate of mbits is the link's own (LearnedLink::
// lineRate, below): SIGNLION_COST_BETA_MBPS is set (its x 8 is then the
// rate), or mbits is a standard rate. For code that has only the rate
// (ncclSignCommGetLinkRate) and must follow the same rule.
bool isLineRate(int64_t mbits);

// The rate every rank uses from every rank's measurement (<= 0: that rank
// measured nothing, not a node's first rank): the slowest one, 0 when none
// measured.
int64_t agreedLinkMbits(const double* measuredMbits, int nranks);

// What follows from a link rate (Mbit/s; > 0).
struct LinkSettings {
  int64_t betaMBps = 0;    // the cost model's beta: mbits / 8, as SIGNLION_COST_BETA_MBPS takes it
  int64_t chunkBytes = 0;  // the host executor's chunk for that beta (hostChunkBytesForBeta)
};
LinkSettings linkSettingsFor(int64_t mbits);

// What a communicator learned: the rate (0: none, the defaults stand) and
// how it was found, for the INFO line.
struct LearnedLink {
  int64_t mbits = 0;
  // The rate is the link's own: set (SIGNLION_COST_BETA_MBPS) or measured
  // as a standard line rate. A measurement between standard rates says the
  // hosts, not the link, set the pace (CPU-bound ranks over a fast link):
  // then nothing is capped at it (send_pacing.h).
  bool lineRate = false;
  std::string how;
};

// Learns the rate as above, the same on every rank, or takes it from
// SIGNLION_COST_BETA_MBPS (x 8) when that is set. No probe (mbits 0) where
// no network link is crossed: one node, the loopback interface, or every
// rank in one machine's one network namespace (nodes made by host ids).
// Errors: ncclInvalidUsage (a WARN naming the variable) when some ranks set
// SIGNLION_COST_BETA_MBPS (or SIGNLION_HOST_CHUNK_BYTES) and others do not; the bootstrap's or the
// network's errors.
ncclResult_t learnLinkRate(const Net& net, Bootstrap& bootstrap, const algo::Topology& topo, int timeoutMs,
                           LearnedLink* out);

}  // namespace host
}  // namespace signlion
