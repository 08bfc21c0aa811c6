"""What an event is and what it costs: kernel classes and subclasses (built-in patterns and the
user's rules), communication kernels known by their evidence, FLOPs, bytes moved and precision from
recorded shapes, and kernel names as people read them."""
