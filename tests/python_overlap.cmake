# DistributedLion's overlap with backward and the sign all-reduce for any PyTorch code
# (python/tests/test_torch_lion_overlap.py, python/tests/test_torch_collectives.py): gloo
# process groups of 2 to 4 spawned ranks on CPU tensors. Included from tests/CMakeLists.txt
# inside its Python block (SIGNLION_PYTHON set, no sanitizer).
signlion_python_tests(overlap test_torch_lion_overlap.py Overlap
                      matches_reference_world2 matches_reference_world3 options_on_vs_off_world2
                      state_across_layouts_world2 accumulation_world2 overlaps_backward_world2
                      failed_background_step_is_raised arguments_checked)
# The same with every bucket's step pipelined in chunks of 64 elements (SIGNLION_LION_CHUNK), one
# parameter of each dtype spanning 5 to 6 chunks: the collectives on the optimizer's own thread,
# under the background step's.
signlion_python_tests(overlap-pipelined test_torch_lion_overlap.py Overlap
                      matches_reference_world3 options_on_vs_off_world2
                      ENVIRONMENT SIGNLION_LIBRARY=$<TARGET_FILE:nccl-sign> SIGNLION_SOCKET_IFNAME=lo
                                  SIGNLION_LION_CHUNK=64 SIGNLION_TEST_LARGE_PARAMS=1)
signlion_python_tests(collectives test_torch_collectives.py SignAllReduce
                      matches_reference_and_errors_world2 matches_reference_world4 subgroup_world3
                      overlapping_subgroups_world3 threads_make_one_communicator_world2
                      empty_calls_world2 empty_calls_world3
                      needs_a_process_group ddp_hook_world2 ddp_hook_world3)
# DistributedLion under the training loops users write (python/tests/test_torch_lion_loops.py):
# clipping and a learning rate changed between backward() and step() (overlap on equals off; also
# a schedule whose first value is the initial lr, set by hand or by StepLR there), in-place writes
# into master_weights parameters kept,
# GradScaler's protocol, a failure on one rank aborting the peers, frozen/tied/channels_last
# parameters, gradients as bucket views, settings compared across ranks, close().
signlion_python_tests(loops test_torch_lion_loops.py Loops
                      clipping_world2 clipping_world3 norm_logging_keeps_overlap_world2 lr_between_backward_and_step_world2
                      lr_schedule_starting_at_the_initial_lr_world2 master_weights_take_in_place_writes_world2
                      late_change_raises_world2 bad_hyperparameter_after_overlap_raises_world2
                      grad_scaler_protocol_world2 failure_aborts_world3
                      calls_that_differ_world2 calls_that_differ_world3 frozen_and_tied_world2 gradients_are_bucket_views_world2 settings_compared_world2
                      close_refuses_world2 compiled_model_world2)
# DistributedLion's step timeline (python/tests/test_torch_lion_timeline.py): the chrome trace of
# 2 ranks, overlap on and off, each bucket in one piece and pipelined in chunks: every bucket's
# events in order per step, parameters equal with tracing on and off, nothing recorded when off.
signlion_python_tests(timeline test_torch_lion_timeline.py Timeline trace_world2 trace_pipelined_world2
                      local_and_merge)
