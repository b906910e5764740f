// Package composecheck holds only a test: no Docker engine runs where the
// tests run, so compose_test.go checks docker-compose.yml, the Dockerfile and
// deploy/stage.yaml against each other and against the repository (services
// present, commands and mounted files that exist, the image's entrypoint, the
// stage's brokers pointing at the kafka service).
package composecheck
