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

ncclResult_t Transfers::test(Op& op, bool* completed, size_t* size) {
  int done = 0, got = 0;
  NCCLCHECK(net_.api().test(op.req, &done, &got));
  *completed = done != 0;
  *size = got < 0 ? 0 : (size_t)got;
  return ncclSuccess;
}

}  // namespace host
}  // namespace signlion
