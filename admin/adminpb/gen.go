// Package adminpb holds the Go code generated from admin.proto: the seqd
// admin (control plane) messages and the Admin gRPC service. Timestamps never
// travel over this service; the data path is RDMA verbs.
//
// The generated files are committed so that a build needs no protoc. To
// regenerate after editing admin.proto, install the plugins once:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
//
// (the versions that generated the committed files, with protoc 3.21.12)
// and run `go generate ./admin/adminpb` (protoc from the protobuf-compiler
// package must be on PATH, and so must $(go env GOPATH)/bin).
package adminpb

//go:generate protoc -I . --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative admin.proto
