// The rating kind's script: nothing to do, keys.js presses the radios by their data-key.
