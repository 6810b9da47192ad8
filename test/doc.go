// Package test holds fleetlimit's end-to-end tests: fleets of real nodes
// coordinating through a real Postgres (see fleettest) while they call
// a simulated provider on 127.0.0.1 whose capacity the tests control.
package test
