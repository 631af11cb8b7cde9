#version 310 es
layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

struct _4
{
    uint _m0;
    uint _m1;
    uint _m2;
};

layout(binding = 0, std430) readonly buffer _11_10
{
    float _m0[];
} _10;

layout(binding = 1, std430) readonly buffer _14_13
{
    int _m0[];
} _13;

layout(binding = 2, std430) buffer _17_16
{
    float _m0[];
} _16;

layout(binding = 3, std430) readonly buffer _20_19
{
    _4 _m0;
} _19;

uint _22(uint _24, uint _25)
{
    return _24 / ((_25 == 0u) ? 1u : _25);
}

uint _33(uint _34, uint _35)
{
    return _34 % ((_35 == 0u) ? 1u : _35);
}

void main()
{
    float _61 = 0.0;
    uint _70 = (((gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x) * 64u) + gl_LocalInvocationIndex;
    if (_70 >= _19._m0._m0)
    {
        return;
    }
    uint _79 = _22(_70, _19._m0._m1);
    if ((_13._m0[_79] >= 0) && (uint(_13._m0[_79]) < _19._m0._m2))
    {
        _61 = _10._m0[(uint(_13._m0[_79]) * _19._m0._m1) + _33(_70, _19._m0._m1)];
    }
    _16._m0[_70] = _61;
}

