# Training with torchrun (docs/TRAINING.md), included from tests/CMakeLists.txt
# inside its python block (SIGNLION_PYTHON exists, not a sanitizer build).
#
# python.train_example.*: examples/train.py under torchrun, 2 ranks on loopback
# (python/tests/test_train_example.py): the ranks end identical and 2K steps
# equal K steps + checkpoint + --resume + K steps bit for bit (overlap off and,
# where DistributedLion takes overlap=, on; DDP + Lion too); --resume refuses a
# checkpoint of other run settings naming the setting, and a run without it a
# folder holding checkpoints; --keep K leaves the K newest (also after a save
# cut short), --keep 0 is refused; --clip-grad-norm runs with identical ranks
# (and changes the result, overlap off); --amp is refused on CPU and runs on
# CUDA (skipped without a GPU); --trace writes each rank's step timeline and
# leaves the parameters as they are.
signlion_python_tests(train_example test_train_example.py TrainExample
                      signlion_resume_exact_overlap_off signlion_resume_exact_overlap_on ddp_lion_resume_exact
                      resume_refuses_other_settings keep_last_k keep_one_after_interrupted_save keep_zero_refused
                      clip_grad_norm_signlion_overlap_off clip_grad_norm_signlion_overlap_on clip_grad_norm_ddp_lion
                      amp_refused_on_cpu amp_cuda trace
                      TIMEOUT 600 ENVIRONMENT "SIGNLION_LIBRARY=$<TARGET_FILE:nccl-sign>")
# python.train_baselines.*: the baselines that adapt a PyTorch part, 2 ranks over gloo
# (python/tests/test_train_baselines.py): DDP's PowerSGD hook one bucket's round at a time
# equals the serial reference bit for bit; the bf16 hook runs or is refused with its reason.
signlion_python_tests(train_baselines test_train_baselines.py TrainBaselines
                      powersgd_ordered_matches_serial bf16_hook_or_clear_refusal)
# The training benchmark's smoke configuration: every contender of
# scripts/train_bench.sh, 2 ranks on loopback, 3 steps of the mlp workload;
# fails when a run fails or a synchronous contender's ranks differ.
add_test(NAME python.train_bench_smoke
         COMMAND env SMOKE=1 SIGNLION_PYTHON=${SIGNLION_PYTHON} bash ${PROJECT_SOURCE_DIR}/scripts/train_bench.sh
                 ${PROJECT_BINARY_DIR} ${PROJECT_BINARY_DIR}/train-smoke)
set_tests_properties(python.train_bench_smoke PROPERTIES LABELS python TIMEOUT 900)
# Interface selection: with SIGNLION_SOCKET_IFNAME unset the host communicator
# follows GLOO_SOCKET_IFNAME, then NCCL_SOCKET_IFNAME, across two namespaces
# where the right interface is not the first (scripts/netns_ifname_follow.sh).
add_test(NAME netns.ifname_follows_gloo_and_nccl
         COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/netns_ifname_follow.sh ${SIGNLION_PYTHON} $<TARGET_FILE:nccl-sign>)
set_tests_properties(netns.ifname_follows_gloo_and_nccl PROPERTIES LABELS "python;netns" SKIP_RETURN_CODE 77
                     TIMEOUT 300)
