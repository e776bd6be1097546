module github.com/mcpdrift/mcpdrift/proto

go 1.26
