// The output of sign_allreduce_perf that nccl-tests' all_reduce_perf also
// writes, shared by the host mode and the GPU mode (--nccl): number formats,
// the -S timestamp, the -I per-iteration statistics, the -J JSON file and the
// closing lines. Only the main rank (process 0, thread 0) calls it.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "sign_allreduce_perf_options.h"

namespace signlion {
namespace perf {

// value in at most `width` characters: 2 decimals, then 1, then 0, then
// exponent notation, whichever fits first (nccl-tests' time and bandwidth form).
std::string formatFixedWidth(double value, int width);

// "YYYY-MM-DD hh:mm:ss", local time (the -S column).
constexpr const char* kTimestampFormat = "%Y-%m-%d %H:%M:%S";
std::string timestampNow();

// -I: statistics of one row's per-iteration times (seconds per call),
// after skipping the first `skip` (-K); nccl-tests' set.
struct IterStats {
  double min = 0, max = 0, p50 = 0, p95 = 0, p99 = 0, avg = 0, stdev = 0, cvPercent = 0;
  int samples = 0;
};
IterStats iterStats(const std::vector<double>& times, int skip);
// "  i_min  i_max  i_p99  i_cv%", each 7 wide, in microseconds (cv in percent).
std::string formatIterStats(const IterStats& s);

// nccl-tests' opening lines: "# Collective test starting: sign_allreduce_perf",
// the "# nThread ... graph: G unalign: U" line and the lines -z and -I add, in
// nccl-tests' words. iterTiming names what -I measures with ("CUDA event
// timing" in --nccl, "host clock timing" in the host mode).
std::string runHeader(const Options& o, int nThread, int nGpus, int graph, const char* iterTiming);

// One "#  Rank" line of the header, and one element of the JSON "devices" list.
struct DeviceInfo {
  int rank = 0, group = 0, pid = 0, device = -1;
  std::string hostname, deviceHex, deviceInfo;  // deviceHex: the text between [ ]
};
std::string deviceLine(const DeviceInfo& d);

// One direction (out-of-place or in-place) of a table row.
struct RowResult {
  double usec = 0, algBw = 0, busBw = 0;
  double wrong = -1;  // -1: not checked
  bool hasIter = false;
  IterStats iter;
  int skipped = 0;                                // -K
  std::vector<double> iterTimes;                  // every iteration's seconds per call, the slowest rank's
  std::vector<std::vector<double>> processTimes;  // the same per process (more than one process only)
};

// -I across ranks, as nccl-tests: iteration i's time is the largest of every
// rank's iteration i ("i_* uses max over process rows"); with more than one
// process, each process's row (the largest over its ranks) is kept for the
// JSON. all: nranks x iters seconds, rank-major; process p holds ranks
// p * ranksPerProcess ... (p + 1) * ranksPerProcess - 1.
void setPerIteration(RowResult* r, const std::vector<double>& all, int nranks, int ranksPerProcess, int skip);

// -J: true when path ends in .json and can be written; else false and a message.
bool outputFileUsable(const std::string& path);

// The out-of-place and in-place columns of a row as nccl-tests prints them
// ("time algbw busbw #wrong", then the -I columns when asked for).
std::string formatResult(const RowResult& r);

// The three header lines' texts of those columns, for both directions:
// the "out-of-place / in-place" line, the column names, their units.
struct ResultColumns {
  std::string top, names, units;
};
ResultColumns resultColumns(const Options& o);

// The -J file in nccl-tests' layout (its JSON version 3), so that readers of
// nccl-tests' files (its tools/analyze_perf_json.py) read it: "version",
// "start_time", "args", "env", "nccl_version", "config" (nccl-tests' keys and
// "devices"), "results" (rows with "out_of_place", "out_of_place_per_iter",
// "in_place", "in_place_per_iter", "actual_iterations"), "out_of_bounds",
// "average_bus_bandwidth", "errors", "end_time". nccl-tests writes booleans
// as the strings "true"/"false" and the root as "%6i" text: so does this.
// Beyond nccl-tests: "program", "mode", "signlion_version"; in "config"
// "nranks", "blocking", "report_cputime", "report_timestamps", "average",
// "unalign", "op", "datatype", "algorithm"; in a row, the Extra fields. "env"
// holds only the NCCL_* and SIGNLION_* variables (nccl-tests writes the
// whole environment).
class JsonReport {
 public:
  // Opens nothing when path is empty; false (and a message) when the file
  // cannot be written or its suffix is not .json (outputFileUsable).
  // ncclVersion < 0: no NCCL in this mode (null).
  bool open(const std::string& path, const Options& o, const std::string& mode, int ncclVersion);
  // "config", then "results" opened. graph: the header's graph value.
  void config(const Options& o, int nThread, int nGpus, int graph, int nranks, const std::vector<DeviceInfo>& devices);
  // A row's extra number fields (signlion's, after nccl-tests' own).
  struct Extra {
    const char* key;
    double value;  // not finite: null
  };
  void row(size_t bytes, size_t count, const char* type, const char* op, const RowResult& out, const RowResult& in,
           const std::vector<Extra>& extra);
  void finish(int wrongRows, double avgBusBw, double minBusBw);

 private:
  FILE* f_ = nullptr;
  bool reportCputime_ = false;
  int iters_ = 0, rows_ = 0;
};

// The closing lines of nccl-tests: out-of-bounds count, average bus bandwidth
// (checked against NCCL_TESTS_MIN_BW when set) and the concluding line.
// Returns true when the bandwidth check failed.
bool printFooter(int wrongRows, double avgBusBw, double minBusBw);

// NCCL_TESTS_MIN_BW, or -1 when unset.
double minBusBwFromEnv();

// Lines "# note: ..." for every given flag that does not apply in this mode
// (host: true for the host mode, false for --nccl), printed in the header.
std::vector<std::string> notApplicableNotes(const Options& o, bool host);

}  // namespace perf
}  // namespace signlion
