// Package composecheck holds only a test: no Docker engine runs where the
// tests run, so compose_test.go checks docker-compose.yml, the Dockerfile and
// deploy/stage.yaml against each other and against the repository (services
// present, commands and mounted files that exist, the image's entrypoint, the
// stage's brokers pointing at the kafka service), and the hardening of the
// deployment: every published port bound to loopback, a .dockerignore that
// keeps .git and the stage's state out of the build context and everything
// the build reads in, and a stage health check a distroless image can run
// (`/stage health`, exec form, flags the CLI defines).
package composecheck
