module github.com/mcpdrift/mcpdrift/services

go 1.26

require github.com/go-json-experiment/json v1.27.2

require github.com/gowebpki/jcs v1.0.2

require github.com/cespare/xxhash/v2 v2.3.0

replace github.com/mcpdrift/mcpdrift/proto => ../proto
