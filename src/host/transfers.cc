#include "host/transfers.h"

namespace signlion {
namespace host {

ncclResult_t Transfers::post(Op& op) {
  const ncclNet_v11_t& api = net_.api();
  if (op.isSend) {
    NCCLCHECK(api.isend(op.comm, op.data, op.bytes, 0, op.mhandle, nullptr, &op.req));
  } else {
    size_t size = op.bytes;
    int tag = 0;
    NCCLCHECK(api.irecv(op.comm, 1, &op.data, &size, &tag, &op.mhandle, nullptr, &op.req));
  }
  op.posted = op.req != nullptr;  // null: the plugin has no slot now, try again later
  return ncclSuccess;
}

ncclResult_t Transfers::test(Op& op, bool* completed) {
  int done = 0, size = 0;
  NCCLCHECK(net_.api().test(op.req, &done, &size));
  *completed = done != 0;
  if (done && !op.isSend && (size_t)size != op.bytes) {
    WARN("host transfers: a receive of %zu bytes completed with %d bytes: the peers disagree on the schedule",
         op.bytes, size);
    return ncclInternalError;
  }
  return ncclSuccess;
}

}  // namespace host
}  // namespace signlion
