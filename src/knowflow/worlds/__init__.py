"""Knowledge worlds: entities, facts and the contexts that agree or conflict with them."""
