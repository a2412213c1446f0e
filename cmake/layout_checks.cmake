# layout_checks.cmake - configure-time checks of the stage layout (included by the top-level
# CMakeLists.txt once every target is defined; a violation stops the configuration).

# The targets `target` depends on, into the variable `out`, aliases resolved. mode LINK: what
# it links, directly or through other targets (private and $<LINK_ONLY:...> entries
# included). mode USAGE: what its users compile against (its INTERFACE_LINK_LIBRARIES and
# theirs, without the $<LINK_ONLY:...> entries a static library's private dependencies leave).
function(neusight_dependency_closure target mode out)
  set(seen "")
  set(todo ${target})
  set(first TRUE)
  while(todo)
    list(POP_FRONT todo t)
    if(mode STREQUAL "USAGE" AND t MATCHES "^\\$<LINK_ONLY:")
      continue()
    endif()
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" t "${t}")
    if(NOT TARGET "${t}" OR "${t}" IN_LIST seen)
      continue()
    endif()
    get_target_property(aliased ${t} ALIASED_TARGET)
    if(aliased)
      list(APPEND todo ${aliased})
      continue()
    endif()
    if(NOT first)
      list(APPEND seen ${t})
    endif()
    set(first FALSE)
    get_target_property(type ${t} TYPE)
    if(mode STREQUAL "LINK" AND NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(libs ${t} LINK_LIBRARIES)
      if(libs)
        list(APPEND todo ${libs})
      endif()
    endif()
    get_target_property(ilibs ${t} INTERFACE_LINK_LIBRARIES)
    if(ilibs)
      list(APPEND todo ${ilibs})
    endif()
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

# Fails the configuration when the `mode` closure of `target` holds any of the other arguments.
function(neusight_check_absent target mode)
  if(NOT TARGET ${target})
    return()
  endif()
  neusight_dependency_closure(${target} ${mode} closure)
  foreach(f ${ARGN})
    if(f IN_LIST closure)
      message(FATAL_ERROR "layout: ${target} ${mode} closure holds ${f}, which it must not")
    endif()
  endforeach()
endfunction()

# The analysis library (what consumers link), the code the CLI shares with the Python module,
# and the module itself never link the trainer or the reader of traced operator graphs.
foreach(t neusight neusight_api neusight_cli neusight_onnx)
  neusight_check_absent(${t} LINK neusight_predictor_training neusight_opgraph)
endforeach()
# Protobuf and ONNX are private to the frontend (and to the model builder, which builds
# protobuf graphs): no stage passes them on to the code that uses it.
foreach(t neusight neusight_onnx_frontend neusight_model_builder neusight_hardware neusight_shape_inference
          neusight_lowering neusight_tiling neusight_predictor neusight_predictor_training neusight_parallel
          neusight_reports neusight_api neusight_cli)
  neusight_check_absent(${t} USAGE onnx_proto protobuf::libprotobuf onnx)
endforeach()
