package engine

// Lane is a group of calls that run together: several safe calls at once, or
// one other call alone.
type Lane struct {
	Calls    []int // batch indexes, ascending
	Parallel bool  // the lane's calls are safe and may run concurrently
}

// Plan groups a batch into lanes, given whether each call is safe: consecutive
// safe calls share one parallel lane and every other call is a lane of its
// own. With sequential set every call is a lane of its own. Lanes run strictly
// in the order returned.
func Plan(safe []bool, sequential bool) []Lane {
	var lanes []Lane
	for i, ok := range safe {
		if ok && !sequential && len(lanes) > 0 && lanes[len(lanes)-1].Parallel {
			last := &lanes[len(lanes)-1]
			last.Calls = append(last.Calls, i)
			continue
		}
		lanes = append(lanes, Lane{Calls: []int{i}, Parallel: ok && !sequential})
	}
	return lanes
}
