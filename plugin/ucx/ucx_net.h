// The UCX transport as each ncclNet version (plugin/transport/net_versions.h
// over ucx_transport.h), for libnccl-net-signlion-ucx.so and for in-process use.
#pragma once

#include "net_v10.h"
#include "net_v11.h"
#include "net_v12.h"
#include "net_v8.h"
#include "net_v9.h"

namespace signlion {
namespace net {

// Name of the network in every version's struct: what NCCL_NET must say.
constexpr const char* kUcxNetName = "signlion-ucx";

const ncclNet_v8_t* ucxNetV8();
const ncclNet_v9_t* ucxNetV9();
const ncclNet_v10_t* ucxNetV10();
const ncclNet_v11_t* ucxNetV11();
const ncclNet_v12_t* ucxNetV12();

}  // namespace net
}  // namespace signlion
