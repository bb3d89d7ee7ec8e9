# scale_predict: the cost model's predictions at cluster scale and on the
# emulated star's measured points (docs/dev/SCALE.md; plotted by scripts/plot_scale.py).
add_executable(scale_predict ${CMAKE_CURRENT_LIST_DIR}/scale_predict.cc)
target_link_libraries(scale_predict PRIVATE signlion_host)
