#include "perf_report.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>

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
  s.p99 = v[std::min(n - 1, (n * 99 + 99) / 100 - 1)];  // nearest rank
  double sum = 0, var = 0;
  for (double t : v) sum += t;
  s.avg = sum / n;
  for (double t : v) var += (t - s.avg) * (t - s.avg);
  s.cvPercent = s.avg > 0 ? std::sqrt(var / n) / s.avg * 100.0 : 0.0;
  return s;
}

std::string formatIterStats(const IterStats& s) {
  return "  " + formatFixedWidth(s.min * 1e6, 7) + "  " + formatFixedWidth(s.max * 1e6, 7) + "  " +
         formatFixedWidth(s.p99 * 1e6, 7) + "  " + formatFixedWidth(s.cvPercent, 7);
}

std::vector<double> maxOverRanks(const std::vector<double>& all, int nranks) {
  const size_t iters = nranks > 0 ? all.size() / nranks : 0;
  std::vector<double> out(iters, 0.0);
  for (int r = 0; r < nranks; r++)
    for (size_t i = 0; i < iters; i++) out[i] = std::max(out[i], all[r * iters + i]);
  return out;
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

// ", "key": value"
void jsonField(FILE* f, const char* key, double v) {
  fprintf(f, ", \"%s\": ", key);
  jsonNumber(f, v);
}
void jsonField(FILE* f, const char* key, const std::string& v) {
  fprintf(f, ", \"%s\": ", key);
  jsonString(f, v);
}

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
  if (r.hasIter) {
    fprintf(f, ", \"per_iter\": {\"samples\": %d", r.iter.samples);
    jsonField(f, "min_us", r.iter.min * 1e6);
    jsonField(f, "max_us", r.iter.max * 1e6);
    jsonField(f, "p99_us", r.iter.p99 * 1e6);
    jsonField(f, "avg_us", r.iter.avg * 1e6);
    jsonField(f, "cv_pct", r.iter.cvPercent);
    fputc('}', f);
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

bool JsonReport::open(const std::string& path, const Options& o, const std::string& mode, int nranks) {
  if (path.empty()) return true;
  if (!outputFileUsable(path)) return false;
  f_ = fopen(path.c_str(), "w");
  if (f_ == nullptr) return false;
  reportCputime_ = o.reportCputime != 0;
  fputs("{\"program\": \"sign_allreduce_perf\", \"mode\": ", f_);
  jsonString(f_, mode);
  fprintf(f_,
          ", \"config\": {\"nranks\": %d, \"nthreads\": %d, \"ngpus\": %d, \"minbytes\": %zu, \"maxbytes\": %zu, "
          "\"step\": %zu, \"step_is_factor\": %s, \"warmup_iters\": %d, \"iters\": %d, \"agg_iters\": %d, "
          "\"check\": %d, \"blocking\": %d, \"cudagraph\": %d, \"report_cputime\": %d, \"average\": %d, "
          "\"unalign\": %d",
          nranks, o.nThreads, o.nGpus, o.minBytes, o.maxBytes, o.stepFactor > 1 ? o.stepFactor : o.stepBytes,
          o.stepFactor > 1 ? "true" : "false", o.warmupIters, o.iters, o.aggIters, o.check, o.blocking, o.graphLaunches,
          o.reportCputime, o.average, o.unalign);
  jsonField(f_, "op", o.op);
  jsonField(f_, "datatype", o.type);
  jsonField(f_, "algorithm", o.algo);
  fputs("}, \"results\": [", f_);
  return true;
}

void JsonReport::row(size_t bytes, size_t count, const char* type, const char* op, const RowResult& out,
                     const RowResult& in) {
  if (f_ == nullptr) return;
  fprintf(f_, "%s\n  {\"size\": %zu, \"count\": %zu, \"type\": ", rows_++ ? "," : "", bytes, count);
  jsonString(f_, type);
  jsonField(f_, "redop", std::string(op));
  fputs(", \"root\": -1", f_);
  jsonResult(f_, "out_of_place", out, reportCputime_);
  jsonResult(f_, "in_place", in, reportCputime_);
  fputc('}', f_);
}

void JsonReport::finish(int wrongRows, double avgBusBw, double minBusBw) {
  if (f_ == nullptr) return;
  fprintf(f_, "\n], \"out_of_bounds\": {\"count\": %d, \"okay\": %s}, \"average_bus_bandwidth\": {\"bandwidth\": ",
          wrongRows, wrongRows ? "false" : "true");
  jsonNumber(f_, avgBusBw);
  fputs(", \"okay\": ", f_);
  if (minBusBw < 0) {
    fputs("\"unchecked\"", f_);
  } else {
    fputs(avgBusBw < minBusBw * 0.9 ? "false" : "true", f_);
  }
  fputs("}}\n", f_);
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
  } else {
    if (given('p'))
      notes.push_back("-p: --nccl initializes its ranks in parallel (one process each, ncclCommInitRank)");
  }
  return notes;
}

}  // namespace perf
}  // namespace signlion
