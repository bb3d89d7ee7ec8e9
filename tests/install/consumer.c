/* Compiled as C against the installed header: the ABI is plain C. */
#include <stdio.h>

#include "nccl_sign.h"

int main(void) {
  int version = 0;
  ncclSignConfig_t config = NCCL_SIGN_CONFIG_INITIALIZER;
  if (ncclSignGetVersion(&version) != ncclSuccess || version != NCCL_SIGN_VERSION_CODE) return 1;
  if (ncclSignConfigCheck(&config) != ncclSuccess) return 2;
  printf("consumer linked signlion %d\n", version);
  return 0;
}
