#include "common/type_name.h"

#include "nccl_sign.h"

namespace signlion {

const char* typeName(int dt) {
  switch (dt) {
    case ncclInt8: return "int8";
    case ncclUint8: return "uint8";
    case ncclInt32: return "int32";
    case ncclUint32: return "uint32";
    case ncclInt64: return "int64";
    case ncclUint64: return "uint64";
    case ncclFloat16: return "half";
    case ncclFloat32: return "float";
    case ncclFloat64: return "double";
    case ncclBfloat16: return "bfloat16";
    default: return "unknown";
  }
}

}  // namespace signlion
