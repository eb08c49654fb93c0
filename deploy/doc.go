// Package deploy holds the container image's Dockerfile, the Kubernetes
// manifests (kubernetes/, for kustomize) and the Helm chart (helm/). It has
// no code of its own: its tests check that the image's build flags give a
// static binary, that a real kube-apiserver accepts every overlay and every
// render of the chart and refuses broken manifests, that the chart renders
// what the kustomize base does, and that the server boots from what the
// chart renders.
package deploy
