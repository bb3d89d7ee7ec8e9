#include "perf_report.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include <unistd.h>  // environ

#include "nccl_sign.h"

namespace signlion {
namespace perf {

std::string formatFixedWidth(double value, int width) {
  char buf[64];
  for (const char* fmt : {"%*.2f", "%*.1f", "%*.0f"}) {
    if (snprintf(buf, sizeof(buf), fmt, width, value) <= width) return buf;
  }
  snprintf(buf, sizeof(buf), width >= 7 ? "%*.1e" : "%*.0e", width, value);
  return buf;
}

std::string timestampNow() {
  time_t now = time(nullptr);
  struct tm local;
  localtime_r(&now, &local);
  char buf[32];
  strftime(buf, sizeof(buf), kTimestampFormat, &local);
  return buf;
}

IterStats iterStats(const std::vector<double>& times, int skip) {
  IterStats s;
  if ((int)times.size() <= skip) return s;
  std::vector<double> v(times.begin() + skip, times.end());
  std::sort(v.begin(), v.end());
  const int n = (int)v.size();
  s.samples = n;
  s.min = v.front();
  s.max = v.back();
  auto percentile = [&](int p) { return v[std::min(n - 1, (n * p + 99) / 100 - 1)]; };  // nearest rank
  s.p50 = v[n / 2];
  s.p95 = percentile(95);
  s.p99 = percentile(99);
  double sum = 0, var = 0;
  for (double t : v) sum += t;
  s.avg = sum / n;
  for (double t : v) var += (t - s.avg) * (t - s.avg);
  s.stdev = std::sqrt(var / n);
  s.cvPercent = s.avg > 0 ? s.stdev / s.avg * 100.0 : 0.0;
  return s;
}

std::string formatIterStats(const IterStats& s) {
  return "  " + formatFixedWidth(s.min * 1e6, 7) + "  " + formatFixedWidth(s.max * 1e6, 7) + "  " +
         formatFixedWidth(s.p99 * 1e6, 7) + "  " + formatFixedWidth(s.cvPercent, 7);
}

void setPerIteration(RowResult* r, const std::vector<double>& all, int nranks, int ranksPerProcess, int skip) {
  const size_t iters = nranks > 0 ? all.size() / nranks : 0;
  const int nprocs = ranksPerProcess > 0 ? (nranks + ranksPerProcess - 1) / ranksPerProcess : 1;
  r->hasIter = true;
  r->skipped = skip;
  r->iterTimes.assign(iters, 0.0);
  r->processTimes.assign(nprocs > 1 ? nprocs : 0, std::vector<double>(iters, 0.0));
  for (int rank = 0; rank < nranks; rank++) {
    for (size_t i = 0; i < iters; i++) {
      const double t = all[rank * iters + i];
      r->iterTimes[i] = std::max(r->iterTimes[i], t);
      if (nprocs > 1) {
        double& row = r->processTimes[rank / ranksPerProcess][i];
        row = std::max(row, t);
      }
    }
  }
  r->iter = iterStats(r->iterTimes, skip);
}

std::string runHeader(const Options& o, int nThread, int nGpus, int graph, const char* iterTiming) {
  char buf[512];
  std::string s = "# Collective test starting: sign_allreduce_perf\n";
  snprintf(buf, sizeof(buf),
           "# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: %d "
           "validation: %d graph: %d unalign: %d\n",
           nThread, nGpus, o.minBytes, o.maxBytes, o.stepFactor > 1 ? o.stepFactor : o.stepBytes,
           o.stepFactor > 1 ? "factor" : "bytes", o.warmupIters, o.iters, o.aggIters, o.check, graph, o.unalign);
  s += buf;
  // nccl-tests' texts, trailing space included, so that scripts matching them match here.
  if (o.blocking == 1) s += "# Blocking Enabled: wait and barrier after each inner iteration (-m) \n";
  if (o.blocking == 2) s += "# Blocking Enabled: wait after each inner iteration (-m), no barrier \n";
  if (o.blocking == 3)
    s += "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier \n";
  if (o.perIterTiming) {
    s += std::string("# Per-Iteration Report: ") + iterTiming + "; i_* uses max over process rows";
    if (o.perIterSkip) {
      snprintf(buf, sizeof(buf), "; summary skips first %d iterations", o.perIterSkip);
      s += buf;
    }
    s += " \n";
  }
  return s;
}

std::string deviceLine(const DeviceInfo& d) {
  char buf[512];
  snprintf(buf, sizeof(buf), "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s\n", d.rank, d.group, d.pid,
           d.hostname.c_str(), d.device, d.deviceHex.c_str(), d.deviceInfo.c_str());
  return buf;
}

std::string formatResult(const RowResult& r) {
  char wrong[32];
  if (r.wrong >= 0) {
    snprintf(wrong, sizeof(wrong), "%6g", r.wrong);
  } else {
    snprintf(wrong, sizeof(wrong), "%6s", "N/A");
  }
  std::string s = "  " + formatFixedWidth(r.usec, 7) + "  " + formatFixedWidth(r.algBw, 6) + "  " +
                  formatFixedWidth(r.busBw, 6) + "  " + wrong;
  if (r.hasIter) s += formatIterStats(r.iter);
  return s;
}

ResultColumns resultColumns(const Options& o) {
  const char* time = o.reportCputime ? "cputime" : "time";
  ResultColumns c;
  for (const char* dir : {"out-of-place", "in-place"}) {
    char buf[160];
    const std::string label = o.perIterTiming ? std::string(dir) + " (+ per-iteration)" : std::string(dir);
    snprintf(buf, sizeof(buf), o.perIterTiming ? "  %-68s" : "  %-34s", label.c_str());
    c.top += buf;
    snprintf(buf, sizeof(buf), "  %7s  %6s  %6s  %6s", time, "algbw", "busbw", "#wrong");
    c.names += buf;
    snprintf(buf, sizeof(buf), "  %7s  %6s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
    c.units += buf;
    if (o.perIterTiming) {
      snprintf(buf, sizeof(buf), "  %7s  %7s  %7s  %7s", "i_min", "i_max", "i_p99", "i_cv%");
      c.names += buf;
      snprintf(buf, sizeof(buf), "  %7s  %7s  %7s  %7s", "(us)", "(us)", "(us)", "(%)");
      c.units += buf;
    }
  }
  return c;
}

namespace {

void jsonString(FILE* f, const std::string& s) {
  fputc('"', f);
  for (char c : s) {
    if (c == '"' || c == '\\') fputc('\\', f);
    if ((unsigned char)c < 0x20) {
      fprintf(f, "\\u%04x", (unsigned char)c);
    } else {
      fputc(c, f);
    }
  }
  fputc('"', f);
}

void jsonNumber(FILE* f, double v) {
  if (std::isfinite(v)) {
    fprintf(f, "%.17g", v);
  } else {
    fputs("null", f);
  }
}

// nccl-tests writes its booleans as strings: readers of its files compare with "true".
const char* jsonBool(bool v) { return v ? "\"true\"" : "\"false\""; }

// "key": value, with a comma before unless first
void jsonKey(FILE* f, const char* key, bool first = false) { fprintf(f, "%s\"%s\": ", first ? "" : ", ", key); }
void jsonField(FILE* f, const char* key, double v) {
  jsonKey(f, key);
  jsonNumber(f, v);
}
void jsonField(FILE* f, const char* key, const std::string& v) {
  jsonKey(f, key);
  jsonString(f, v);
}
void jsonField(FILE* f, const char* key, int v) { fprintf(f, ", \"%s\": %d", key, v); }
void jsonField(FILE* f, const char* key, size_t v) { fprintf(f, ", \"%s\": %zu", key, v); }
void jsonBoolField(FILE* f, const char* key, bool v) { fprintf(f, ", \"%s\": %s", key, jsonBool(v)); }

// [a, b, ...] of microseconds
void jsonMicroseconds(FILE* f, const std::vector<double>& seconds) {
  fputc('[', f);
  for (size_t i = 0; i < seconds.size(); i++) {
    if (i) fputs(", ", f);
    jsonNumber(f, seconds[i] * 1e6);
  }
  fputc(']', f);
}

// "out_of_place": {...}[, "out_of_place_per_iter": {...}], nccl-tests' fields
void jsonResult(FILE* f, const char* key, const RowResult& r, bool cputime) {
  fprintf(f, ", \"%s\": {\"%s\": ", key, cputime ? "cpu_time" : "time");
  jsonNumber(f, r.usec);
  jsonField(f, "alg_bw", r.algBw);
  jsonField(f, "bus_bw", r.busBw);
  if (r.wrong >= 0) {
    jsonField(f, "nwrong", r.wrong);
  } else {
    fputs(", \"nwrong\": null", f);
  }
  fputc('}', f);
  if (!r.hasIter) return;
  fprintf(f, ", \"%s_per_iter\": {\"skipped_iterations\": %d", key, r.skipped);
  jsonField(f, "min_us", r.iter.min * 1e6);
  jsonField(f, "max_us", r.iter.max * 1e6);
  jsonField(f, "avg_us", r.iter.avg * 1e6);
  jsonField(f, "p50_us", r.iter.p50 * 1e6);
  jsonField(f, "p95_us", r.iter.p95 * 1e6);
  jsonField(f, "p99_us", r.iter.p99 * 1e6);
  jsonField(f, "stdev_us", r.iter.stdev * 1e6);
  jsonField(f, "cv_pct", r.iter.cvPercent);
  jsonKey(f, "times_us");
  jsonMicroseconds(f, r.iterTimes);
  if (!r.processTimes.empty()) {
    jsonKey(f, "per_process_max_times_us");
    fputc('[', f);
    for (size_t p = 0; p < r.processTimes.size(); p++) {
      if (p) fputs(", ", f);
      jsonMicroseconds(f, r.processTimes[p]);
    }
    fputc(']', f);
  }
  fputc('}', f);
}

}  // namespace

bool outputFileUsable(const std::string& path) {
  if (path.size() < 5 || path.compare(path.size() - 5, 5, ".json") != 0) {
    fprintf(stderr, "-J %s: only JSON output is supported (a path ending in .json)\n", path.c_str());
    return false;
  }
  // "a", not "w": every process checks its options, and one started by hand
  // after process 0 began writing must not truncate that file under it.
  FILE* f = fopen(path.c_str(), "a");
  if (f == nullptr) {
    fprintf(stderr, "-J %s: cannot write the file\n", path.c_str());
    return false;
  }
  fclose(f);
  return true;
}

bool JsonReport::open(const std::string& path, const Options& o, const std::string& mode, int ncclVersion) {
  if (path.empty()) return true;
  if (!outputFileUsable(path)) return false;
  f_ = fopen(path.c_str(), "w");
  if (f_ == nullptr) return false;
  reportCputime_ = o.reportCputime != 0;
  iters_ = o.iters;
  fputs("{\"version\": 3", f_);  // nccl-tests' JSON_FILE_VERSION of this layout
  jsonField(f_, "start_time", timestampNow());
  jsonKey(f_, "args");
  fputc('[', f_);
  for (size_t i = 0; i < o.args.size(); i++) {
    if (i) fputs(", ", f_);
    jsonString(f_, o.args[i]);
  }
  fputs("], \"env\": [", f_);
  bool first = true;
  for (char** e = environ; *e != nullptr; e++) {
    if (strncmp(*e, "NCCL_", 5) != 0 && strncmp(*e, "SIGNLION_", 9) != 0) continue;
    if (!first) fputs(", ", f_);
    first = false;
    jsonString(f_, *e);
  }
  fputc(']', f_);
  if (ncclVersion >= 0) {
    jsonField(f_, "nccl_version", ncclVersion);
  } else {
    fputs(", \"nccl_version\": null", f_);
  }
  jsonField(f_, "program", std::string("sign_allreduce_perf"));
  jsonField(f_, "mode", mode);
  int version = 0;
  ncclSignGetVersion(&version);
  jsonField(f_, "signlion_version", version);
  return true;
}

void JsonReport::config(const Options& o, int nThread, int nGpus, int graph, int nranks,
                        const std::vector<DeviceInfo>& devices) {
  if (f_ == nullptr) return;
  fputs(", \"config\": {", f_);
  jsonKey(f_, "nthreads", true);
  fprintf(f_, "%d", nThread);
  jsonField(f_, "ngpus", nGpus);
  jsonField(f_, "minimum_bytes", o.minBytes);
  jsonField(f_, "maximum_bytes", o.maxBytes);
  if (o.stepFactor > 1) {
    jsonField(f_, "step_factor", o.stepFactor);
  } else {
    jsonField(f_, "step_bytes", o.stepBytes);
  }
  jsonField(f_, "warmup_iters", o.warmupIters);
  jsonField(f_, "iterations", o.iters);
  jsonField(f_, "aggregated_iterations", o.aggIters);
  jsonField(f_, "validation", o.check);
  jsonField(f_, "graph", graph);
  jsonBoolField(f_, "blocking_collectives", o.blocking != 0);
  jsonBoolField(f_, "per_iter_timing", o.perIterTiming != 0);
  jsonField(f_, "per_iter_skip", o.perIterSkip);
  jsonBoolField(f_, "parallel_init", o.parallelInit != 0);
  jsonKey(f_, "devices");
  fputc('[', f_);
  for (size_t i = 0; i < devices.size(); i++) {
    const DeviceInfo& d = devices[i];
    fprintf(f_, "%s{\"rank\": %d, \"group\": %d, \"pid\": %d", i ? ", " : "", d.rank, d.group, d.pid);
    jsonField(f_, "hostname", d.hostname);
    jsonField(f_, "device", d.device);
    jsonField(f_, "device_hex", d.deviceHex);
    jsonField(f_, "device_info", d.deviceInfo);
    fputc('}', f_);
  }
  fputc(']', f_);
  // signlion's
  jsonField(f_, "nranks", nranks);
  jsonField(f_, "blocking", o.blocking);
  jsonField(f_, "report_cputime", o.reportCputime);
  jsonField(f_, "report_timestamps", o.reportTimestamps);
  jsonField(f_, "average", o.average);
  jsonField(f_, "unalign", o.unalign);
  jsonField(f_, "op", o.op);
  jsonField(f_, "datatype", o.type);
  jsonField(f_, "algorithm", o.algo);
  fputs("}, \"results\": [", f_);
}

void JsonReport::row(size_t bytes, size_t count, const char* type, const char* op, const RowResult& out,
                     const RowResult& in, const std::vector<Extra>& extra) {
  if (f_ == nullptr) return;
  fprintf(f_, "%s\n  {\"size\": %zu, \"count\": %zu", rows_++ ? "," : "", bytes, count);
  jsonField(f_, "type", std::string(type));
  jsonField(f_, "redop", std::string(op));
  fputs(", \"root\": \"    -1\"", f_);  // nccl-tests: the table's "%6i" text
  jsonResult(f_, "out_of_place", out, reportCputime_);
  jsonResult(f_, "in_place", in, reportCputime_);
  jsonField(f_, "actual_iterations", iters_);
  jsonField(f_, "experiment_name", std::string());
  for (const Extra& e : extra) jsonField(f_, e.key, e.value);
  fputc('}', f_);
}

void JsonReport::finish(int wrongRows, double avgBusBw, double minBusBw) {
  if (f_ == nullptr) return;
  fprintf(f_, "\n], \"out_of_bounds\": {\"count\": %d, \"okay\": %s}, \"average_bus_bandwidth\": {\"bandwidth\": ",
          wrongRows, jsonBool(wrongRows == 0));
  jsonNumber(f_, avgBusBw);
  fputs(", \"okay\": ", f_);
  fputs(minBusBw < 0 ? "\"unchecked\"" : jsonBool(avgBusBw >= minBusBw * 0.9), f_);
  fputs("}, \"errors\": []", f_);  // nccl-tests: NCCL's last error; a failed run writes no closing
  jsonField(f_, "end_time", timestampNow());
  fputs("}\n", f_);
  fclose(f_);
  f_ = nullptr;
}

double minBusBwFromEnv() {
  const char* env = getenv("NCCL_TESTS_MIN_BW");
  return env ? atof(env) : -1;
}

bool printFooter(int wrongRows, double avgBusBw, double minBusBw) {
  const bool bwFailed = minBusBw >= 0 && avgBusBw < minBusBw * 0.9;
  printf("# %-20s : %d %s\n", "Out of bounds values", wrongRows, wrongRows ? "FAILED" : "OK");
  printf("# %-20s : %g %s\n", "Avg bus bandwidth", avgBusBw, minBusBw < 0 ? "" : (bwFailed ? "FAILED" : "OK"));
  printf("#\n");
  printf("# Collective test concluded: sign_allreduce_perf\n");
  return bwFailed;
}

std::vector<std::string> notApplicableNotes(const Options& o, bool host) {
  std::vector<std::string> notes;
  auto given = [&](char c) { return o.given[(unsigned char)c]; };
  if (given('r')) notes.push_back("-r: an all-reduce has no root (ignored; the root column is -1)");
  if (given('x'))
    notes.push_back("-x: not applied: the communicators are made with NCCL's default config (CTA policy unset)");
  if (given('D') || given('V'))
    notes.push_back(
        "-D/-V: nccl-tests' own device-API all-reduce kernels; sign_allreduce_perf times "
        "ncclSign*AllReduce (ignored)");
  if (host) {
    const char* why = "the host mode runs no CUDA work (it applies to --nccl)";
    if (given('G')) notes.push_back(std::string("-G: CUDA graph launches: not applicable: ") + why);
    if (given('y')) notes.push_back(std::string("-y: the CUDA default stream: not applicable: ") + why);
    if (given('R')) notes.push_back(std::string("-R: NCCL buffer registration: not applicable: ") + why);
    if (given('M')) notes.push_back(std::string("-M: the GPU memory report: not applicable: ") + why);
    if (given('p'))
      notes.push_back("-p: the host mode always initializes its ranks in parallel (one thread or process each)");
    if (given('C') && o.reportCputime)
      notes.push_back("-C: host calls return when their result is in place: the issuing time is the latency");
    if (given('A') && (o.op == "sum" || o.op == "mpisum" || o.op == "onebit"))
      notes.push_back("-A: the sign all-reduce's algorithm (-o mavo, avg): the " + o.op +
                      " rows run the plain ring sum (sum), MPI_Allreduce (mpisum) or the 1-bit compressed "
                      "all-reduce (onebit) whatever it is");
  } else {
    if (given('p'))
      notes.push_back("-p: --nccl initializes its ranks in parallel (one process each, ncclCommInitRank)");
  }
  return notes;
}

}  // namespace perf
}  // namespace signlion
