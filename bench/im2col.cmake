# convgen_im2col: the explicit im2col / col2im + BLIS SGEMM convolutions (forward,
# backward-data, backward-weights; bench/im2col_blis.h, bench/im2col_blis_backward.h).
# One library for both users: convgen-bench's `blis` peer (owned buffers) and the
# trainer's `--conv-impl im2col-blis` (generator/train_conv_im2col.cpp, caller-provided
# per-thread workspaces). Included by the top level after convgen_core, before the CLI,
# whether or not convgen-bench is built (it needs no oneDNN).
set(CONVGEN_IM2COL_DIR "${CMAKE_CURRENT_LIST_DIR}/..")
add_library(convgen_im2col STATIC
  "${CONVGEN_IM2COL_DIR}/bench/im2col_blis.h"
  "${CONVGEN_IM2COL_DIR}/bench/im2col_blis.cpp"
  "${CONVGEN_IM2COL_DIR}/bench/im2col_blis_backward.h"
  "${CONVGEN_IM2COL_DIR}/bench/im2col_blis_backward.cpp")
target_include_directories(convgen_im2col PUBLIC "${CONVGEN_IM2COL_DIR}/bench")
target_link_libraries(convgen_im2col PUBLIC convgen_core PRIVATE BLIS::BLIS OpenMP::OpenMP_CXX fmt::fmt)
target_compile_options(convgen_im2col PRIVATE -Wall -Wextra)
