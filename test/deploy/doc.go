// Package deploy holds the tests of what a release ships beside the
// code: the reproducible release build (scripts/release.sh), the
// Dockerfile and the Kubernetes manifests under deploy/. No container
// runtime runs here: the tests build the binary with the Dockerfile's own
// build command, check that it is static, start it as the manifests
// configure it and probe it, and check that the manifests name the ports,
// paths and files the configuration uses.
package deploy
