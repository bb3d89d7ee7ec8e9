# The UCX setup formats' decoder needs no UCX: the unit tests
# (unit/wire_formats_test.cc) compile it in directly, so it is tested on every
# build, with or without UCX.
target_sources(signlion_unit_tests PRIVATE ${PROJECT_SOURCE_DIR}/plugin/ucx/ucx_wire.cc)
