# A sharded campaign on a real one-node Slurm cluster the test starts and stops itself
# (tests/slurm_test.sh: munged, slurmctld, slurmd on free ports, deploy/slurm/submit.sh,
# a 3-task array and the dependent merge job). Skipped (77) where the daemons cannot start
# (not root, packages missing: scripts/setup.sh installs them).
add_test(NAME slurm_campaign COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/slurm_test.sh ${PROJECT_BINARY_DIR})
set_tests_properties(slurm_campaign PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 ENVIRONMENT "${AF_BLAS_ENV}")
