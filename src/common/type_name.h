// The name of an NCCL datatype, for log lines and error messages.
#pragma once

namespace signlion {

// "int8", "half", "bfloat16", ...; "unknown" for any other value (an int:
// a peer's message may carry a value that is no ncclDataType_t).
const char* typeName(int dt);

}  // namespace signlion
