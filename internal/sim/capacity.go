package sim

import (
	"errors"
	"fmt"
	"time"
)

// Capacity is a Provider's hidden concurrency capacity over time: how many
// requests it serves at once at base latency. Build one with Fixed, Stepped
// or FollowModel; the zero Capacity is invalid. A Capacity is a description
// and is safe to copy, except that a FollowModel capacity shares its Model.
type Capacity struct {
	kind  capacityKind
	fixed int
	steps []Step
	model *Model
}

type capacityKind int

const (
	capacityUnset capacityKind = iota
	capacityFixed
	capacityStepped
	capacityModel
)

// Step is one stage of a Stepped capacity: from At after the provider
// started, the capacity is Capacity.
type Step struct {
	At       time.Duration
	Capacity int
}

// Fixed returns a capacity of c concurrent requests, forever (until
// Provider.SetCapacity). c must be >= 0; 0 means every request is over
// capacity.
func Fixed(c int) Capacity {
	return Capacity{kind: capacityFixed, fixed: c}
}

// Stepped returns a capacity that follows steps, measured on the
// provider's Clock from when the provider was created. steps must be
// non-empty, start At 0, have strictly increasing At and capacities >= 0.
// The slice is copied.
func Stepped(steps []Step) Capacity {
	return Capacity{kind: capacityStepped, steps: append([]Step(nil), steps...)}
}

// FollowModel returns a capacity driven by model: the capacity is
// model.Capacity(), and the model takes one Step per second of the
// provider's Clock (counted from when the provider was created), fed with
// the time-weighted mean concurrency the provider served during that second
// (in-flight requests integrated over the second, divided by one second;
// rejected requests do not count). By Little's law that mean is the k of
// the published model, whose requests each last one step. The provider
// owns the model from then on: do not call its methods while the provider
// runs.
func FollowModel(model *Model) Capacity {
	return Capacity{kind: capacityModel, model: model}
}

// validate reports why c is unusable, naming the ProviderConfig field.
func (c Capacity) validate() error {
	switch c.kind {
	case capacityUnset:
		return errors.New("sim: ProviderConfig.Capacity must be set with Fixed, Stepped or FollowModel")
	case capacityFixed:
		if c.fixed < 0 {
			return fmt.Errorf("sim: ProviderConfig.Capacity: Fixed capacity must be >= 0, got %d", c.fixed)
		}
	case capacityStepped:
		if len(c.steps) == 0 {
			return errors.New("sim: ProviderConfig.Capacity: Stepped needs at least one step")
		}
		if c.steps[0].At != 0 {
			return fmt.Errorf("sim: ProviderConfig.Capacity: Stepped must start At 0, got %v", c.steps[0].At)
		}
		for i, s := range c.steps {
			if s.Capacity < 0 {
				return fmt.Errorf("sim: ProviderConfig.Capacity: Stepped step %d capacity must be >= 0, got %d", i, s.Capacity)
			}
			if i > 0 && s.At <= c.steps[i-1].At {
				return fmt.Errorf("sim: ProviderConfig.Capacity: Stepped step %d At (%v) must be after step %d At (%v)", i, s.At, i-1, c.steps[i-1].At)
			}
		}
	case capacityModel:
		if c.model == nil {
			return errors.New("sim: ProviderConfig.Capacity: FollowModel needs a non-nil model")
		}
	}
	return nil
}
