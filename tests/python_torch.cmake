# The tests of signlion.torch and of the training example, registered once per
# PyTorch: included from tests/CMakeLists.txt with SIGNLION_TEST_PYTHON and
# SIGNLION_TEST_ROOT set, as python.* under SIGNLION_PYTHON (Debian's PyTorch
# 1.13) and as torch2.* under SIGNLION_TORCH2_PYTHON (a current PyTorch 2.x in
# the virtual environment scripts/setup_torch2.sh makes). ROOT below is
# SIGNLION_TEST_ROOT.
# The package's modules import each other without a loop (python/tests/test_package_imports.py):
# the import graph read from the source, deferred imports included, has no cycle, and each module
# imports first in a fresh interpreter.
signlion_python_tests(package test_package_imports.py PackageImports
                      no_import_cycle each_module_first_in_a_fresh_interpreter)
signlion_python_tests("" test_torch_lion.py DistributedLionTorch
                      matches_reference_world2 matches_reference_world4 state_dict_round_trip_world2
                      store_bootstrap_world2 store_bootstrap_world4 local_needs_no_process_group
                      parameters_without_gradient_keep_their_values comm_rejects_a_malformed_unique_id
                      comm_host_id_groups_ranks)
# DistributedLion as a torch.optim optimizer (python/tests/test_torch_lion_api.py).
signlion_python_tests(api test_torch_lion_api.py LocalState
                      state_holds_exp_avg_per_parameter loads_a_plain_lion_state_dict
                      loads_a_lion_pytorch_state_dict flags zero_lr_local
                      arguments_named bad_hyperparameter_mid_run_overlap_off bad_hyperparameter_mid_run_overlap_on
                      second_optimizer_takes_parameters_over state_dict_hooks)
signlion_python_tests(api test_torch_lion_api.py AcrossRanks
                      gradient_on_some_ranks_world2 gradient_on_some_ranks_world3 zero_lr_schedules_world2
                      add_param_group_world2 parameters_broadcast_from_rank0_world3
                      models_that_differ_fail_clearly_world2 models_that_differ_fail_clearly_world3
                      state_dict_torch_format_world2 old_opaque_format_world2
                      nonmember_process_group_world3 vote_rules_differ_world2 vote_rules_differ_world3)
include(${CMAKE_CURRENT_SOURCE_DIR}/python_overlap.cmake)
# CUDA tensors (python/tests/test_torch_lion_cuda.py): skipped (77) without
# CUDA, without PyTorch's ProcessGroupNCCL._comm_ptr (2.8+) or without NCCL.
set(_cuda_env "SIGNLION_LIBRARY=$<TARGET_FILE:nccl-sign>;SIGNLION_SOCKET_IFNAME=lo;SIGNLION_TEST_NET_PLUGIN=$<TARGET_FILE:nccl-net-signlion>")
signlion_python_tests(cuda test_torch_lion_cuda.py DistributedLionCuda
                      comm_ptr_missing_names_the_pytorch_version  # no GPU needed
                      TIMEOUT 600 ENVIRONMENT ${_cuda_env})
signlion_python_tests(cuda test_torch_lion_cuda.py DistributedLionCuda
                      local_cuda_equals_cpu nccl_world2_equals_cpu nccl_world4_equals_cpu
                      local_cuda_state_and_flags nccl_world2_torch_api nccl_world2_overlap_equals_cpu
                      nccl_world2_sign_all_reduce nccl_world2_rules_per_optimizer local_cuda_overlap_equals_cpu
                      nccl_world2_clipping_and_grad_scaler
                      TIMEOUT 600 ENVIRONMENT ${_cuda_env} LABELS python gpu)
# perf/lion_step_bench.py (its CUDA run is scripts/gpu_checks.sh's lion-step
# step): the script itself on CPU tensors, small, so it cannot rot unseen:
# every contender runs and the ranks' parameters must agree (exit 1 if not).
add_test(NAME ${SIGNLION_TEST_ROOT}.lion_step_bench_cpu
         COMMAND ${SIGNLION_TEST_PYTHON} ${PROJECT_SOURCE_DIR}/perf/lion_step_bench.py --device cpu --params 100003
                 --world 3 --steps 2 --warmup 1 --aggregations mavo average global)
set_tests_properties(${SIGNLION_TEST_ROOT}.lion_step_bench_cpu PROPERTIES LABELS "python;${SIGNLION_TEST_ROOT}" TIMEOUT 300
                     ENVIRONMENT "SIGNLION_LIBRARY=$<TARGET_FILE:nccl-sign>;PYTHONPATH=${PROJECT_SOURCE_DIR}/python;SIGNLION_SOCKET_IFNAME=lo")
# ROOT.train_example.*: examples/train.py under torchrun, 2 ranks on loopback
# (python/tests/test_train_example.py): the ranks end identical and 2K steps
# equal K steps + checkpoint + --resume + K steps bit for bit (overlap off and,
# where DistributedLion takes overlap=, on; --delay 1; DDP + Lion too); --resume refuses a
# checkpoint of other run settings naming the setting (not --overlap, which a resume
# may flip), a folder where no step is complete on every rank (a rank's files lost,
# another rank count), and a run without --resume a folder holding checkpoints; --keep K leaves the K newest (also after a save
# cut short), --keep 0 is refused; --clip-grad-norm runs with identical ranks
# (and changes the result, overlap off); --amp is refused on CPU and runs on
# CUDA (skipped without a GPU); --trace writes each rank's step timeline and
# leaves the parameters as they are.
signlion_python_tests(train_example test_train_example.py TrainExample
                      signlion_resume_exact_overlap_off signlion_resume_exact_overlap_on signlion_resume_exact_delay
                      ddp_lion_resume_exact
                      resume_refuses_other_settings resume_refuses_a_folder_no_step_is_complete_in keep_last_k keep_one_after_interrupted_save keep_zero_refused
                      clip_grad_norm_signlion_overlap_off clip_grad_norm_signlion_overlap_on clip_grad_norm_ddp_lion
                      amp_refused_on_cpu amp_cuda trace
                      TIMEOUT 600 ENVIRONMENT "SIGNLION_LIBRARY=$<TARGET_FILE:nccl-sign>")
# ROOT.train_baselines.*: the baselines that adapt a PyTorch part, 2 ranks over gloo
# (python/tests/test_train_baselines.py): DDP's PowerSGD hook one bucket's round at a time
# equals the serial reference bit for bit; the bf16 hook runs or is refused with its reason.
signlion_python_tests(train_baselines test_train_baselines.py TrainBaselines
                      powersgd_ordered_matches_serial bf16_hook_or_clear_refusal)
# DistributedLion(delay=1), the one-step-delayed vote (python/tests/test_torch_lion_delay.py): bit
# for bit against the NumPy Lion's two halves with step t applying step t-1's vote, 2 and 3 ranks,
# overlap on and off; resume exact with the vote in flight saved; arguments checked; step t's vote
# queued before step t-1's is applied; a process exiting with background calls in flight exits
# cleanly. Again with the library's step pipelined in chunks of 16 elements (the vote's collective on its own thread).
signlion_python_tests(delay test_torch_lion_delay.py Delay
                      matches_delayed_reference_world2 matches_delayed_reference_world3 resume_exact_world2
                      arguments_checked maximize_and_close exit_with_calls_in_flight next_vote_starts_before_the_apply
                      submit_after_the_exit_hook_runs_inline)
signlion_python_tests(delay-pipelined test_torch_lion_delay.py Delay
                      matches_delayed_reference_world3 resume_exact_world2
                      ENVIRONMENT SIGNLION_LIBRARY=$<TARGET_FILE:nccl-sign> SIGNLION_SOCKET_IFNAME=lo
                                  SIGNLION_LION_CHUNK=16)
