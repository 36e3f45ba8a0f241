void cgw_system_anchor(void) {}
