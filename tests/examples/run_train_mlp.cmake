# examples/train_mlp as a user runs it: trains the regression MLP and requires the held-out error
# to fall below MAX_UNEXPLAINED percent of the targets' variance (it starts near 100%). With
# MPIEXEC: 2 ranks with ZeRO stage ZERO save a checkpoint, and one process resumes it without ZeRO
# (grad-accum 2: the same global batch) and finishes the run.
function(run_mlp out_var)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "train_mlp failed (${result}):\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

function(require_learned out)
  if(NOT out MATCHES "unexplained ([0-9.]+)%")
    message(FATAL_ERROR "train_mlp printed no held-out result")
  endif()
  if(CMAKE_MATCH_1 GREATER_EQUAL MAX_UNEXPLAINED)
    message(FATAL_ERROR "train_mlp left ${CMAKE_MATCH_1}% of the variance unexplained (limit ${MAX_UNEXPLAINED}%)")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
if(NOT MPIEXEC)
  run_mlp(out ${TRAIN_MLP} --steps 400 --log-every 100)
  require_learned("${out}")
  return()
endif()
run_mlp(out ${MPIEXEC} -np 2 --oversubscribe ${TRAIN_MLP} --zero ${ZERO} --steps 200 --log-every 100
        --checkpoint-dir ${WORK_DIR})
if(NOT out MATCHES "ZeRO-${ZERO}, model state")
  message(FATAL_ERROR "train_mlp under mpirun did not train with ZeRO-${ZERO}")
endif()
run_mlp(out ${TRAIN_MLP} --steps 400 --grad-accum 2 --log-every 100 --checkpoint-dir ${WORK_DIR} --resume)
if(NOT out MATCHES "resumed at step 200")
  message(FATAL_ERROR "train_mlp did not resume the 2-rank checkpoint at step 200")
endif()
require_learned("${out}")
