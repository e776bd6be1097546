module github.com/mcpdrift/mcpdrift/services

go 1.26

require github.com/mcpdrift/mcpdrift/proto v0.0.0

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-json-experiment/json v1.27.2 // indirect
	github.com/gowebpki/jcs v1.0.2 // indirect
)

replace github.com/mcpdrift/mcpdrift/proto => ../proto
