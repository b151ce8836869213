# The Kubernetes manifests (tests/k8s_test.py): deploy/k8s/render.py's Indexed Job and merge
# Job against the API schema (deploy/k8s/validate.py over the kubernetes client's models),
# their fields, and the pods' commands run here as Kubernetes would (JOB_COMPLETION_INDEX).
# Debian's Python, where apt installs python3-yaml and python3-kubernetes (scripts/setup.sh);
# skipped (77) without PyYAML.
find_program(AF_SYSTEM_PYTHON3 NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(NOT AF_SYSTEM_PYTHON3)
  find_program(AF_SYSTEM_PYTHON3 python3)
endif()
if(AF_SYSTEM_PYTHON3)
  add_test(NAME k8s_manifests COMMAND ${AF_SYSTEM_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/k8s_test.py
           ${PROJECT_BINARY_DIR}/attnfuzz ${PROJECT_BINARY_DIR}/k8s)
  set_tests_properties(k8s_manifests PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 ENVIRONMENT "${AF_BLAS_ENV}")
endif()
