// Package objectstore is a separate module that builds SeaweedFS's weed binary, the dev
// cluster's S3-compatible object store, from its Go module.
//
// No prebuilt binary can be downloaded on the machines this project runs on. go.mod names
// the server's main package as a tool, so `go build github.com/seaweedfs/seaweedfs/weed`
// inside this module builds it at the pinned version; `make objectstore` does that into
// bin/objectstore/ and skips the build when it is up to date. The module is kept apart from
// the operator's so the server's large dependency graph never enters the operator's go.mod.
package objectstore
