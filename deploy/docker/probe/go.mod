module github.com/mcpdrift/mcpdrift/deploy/docker/probe

go 1.26.0
