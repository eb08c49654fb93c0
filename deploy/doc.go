// Package deploy holds the container image's Dockerfile and the Kubernetes
// manifests (kubernetes/). It has no code of its own: its tests check that
// the image's build flags give a static binary and that a real
// kube-apiserver accepts every overlay and refuses broken manifests.
package deploy
